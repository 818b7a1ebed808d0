"""The collective model's held-out residuals (`data/collectives/residuals.json`): quantiles per scope and
message size, an empty size band falling back to its scope, lookups per call, and the shipped file naming
the dataset it was computed from."""

import hashlib

import numpy as np
import pandas as pd
import pytest

from maya.estimators.collective_residuals import REGIMES, SCOPES, CollectiveResiduals, shipped_residuals, summarize


def test_quantiles_per_scope_and_size():
    rng = np.random.default_rng(0)
    rows = pd.DataFrame(
        {
            "scope": ["intra-node"] * 1000 + ["inter-node"] * 1000,
            "regime": [">=16MB"] * 1500 + ["<64KB"] * 500,
            "log_ratio": np.concatenate([rng.normal(0.0, 0.1, 1000), rng.normal(-0.5, 0.3, 1000)]),
        }
    )
    r = summarize(rows, {"dataset": "synthetic"})
    q10, q50, q90 = r.quantiles["intra-node"][">=16MB"]
    assert q10 == pytest.approx(-0.128, abs=0.02) and q50 == pytest.approx(0.0, abs=0.02) and q90 > 0.1
    assert r.quantiles["intra-node"]["<64KB"] == r.quantiles["intra-node"][">=16MB"]  # no rows: the scope's
    assert r.rows["inter-node"] == {"<64KB": 500, "64KB-1MB": 0, "1-16MB": 0, ">=16MB": 500}
    again = CollectiveResiduals.from_json(r.to_json())
    looked = again.of(np.array(["intra-node", "inter-node"]), np.array([1 << 30, 1000]))
    assert looked.tolist() == [list(r.quantiles["intra-node"][">=16MB"]), list(r.quantiles["inter-node"]["<64KB"])]


def test_shipped_residuals_cover_every_scope_and_size():
    r = shipped_residuals()
    for scope in SCOPES:
        for regime in REGIMES:
            q10, q50, q90 = r.quantiles[scope][regime]
            assert q10 <= q50 <= q90
    assert r.provenance["split"].startswith("leave one network out")


def test_shipped_residuals_name_the_shipped_collectives():
    """Fails once data/vidur/collectives.parquet changes without `python -m maya.estimators.collective_residuals`."""
    from maya.estimators.collective_data import shipped_dataset

    if not shipped_dataset().is_file():
        pytest.skip("data/vidur/collectives.parquet is not shipped in this checkout")
    assert shipped_residuals().provenance["sha256"] == hashlib.sha256(shipped_dataset().read_bytes()).hexdigest()
