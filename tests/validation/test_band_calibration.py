"""`benchmarks/band_calibration.py`: the shipped band widths re-derive from the rows shipped beside them, a suite
left out never shapes its own band, and stored rows give back their residual band."""

import importlib.util

import numpy as np
import pandas as pd
import pytest
from paths import REPO

from maya.simulator.discrepancy import shipped_discrepancy, shipped_path
from maya.validation.store import RowKey, RowResult, save


@pytest.fixture(scope="module")
def calibration():
    path = REPO / "benchmarks" / "band_calibration.py"
    spec = importlib.util.spec_from_file_location("maya_benchmark_band_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(calibration):
    return pd.read_csv(shipped_path().parent / calibration.ROWS_FILE.name)


def test_the_shipped_widths_are_those_of_the_shipped_rows(calibration, rows):
    shipped = shipped_discrepancy()
    d_low, d_high, scale = calibration.widths_for(rows, None)
    assert (round(d_low, 4), round(d_high, 4), scale) == (shipped.low, shipped.high, shipped.residual_scale)
    table, _ = calibration.left_out(rows, "suite", None)
    for r in table.itertuples():
        assert shipped.provenance["left_out"][f"{r.suite}/{r.gpu}"] == [r.rows, r.coverage_pct, r.median_width_pct]
    assert shipped.provenance["rows"] == len(rows) and rows["suite"].nunique() >= 2


def test_a_suite_left_out_never_shapes_its_own_band(calibration, rows):
    suite = "llm-foundry"
    moved = rows.copy()
    mine = moved["suite"] == suite
    moved.loc[mine, "measured"] = moved.loc[mine, "measured"] * np.exp(np.linspace(-0.5, 0.5, mine.sum()))
    before = calibration.widths_for(rows[~mine], None)
    after = calibration.widths_for(moved[~mine], None)
    assert before == after  # its own errors moved by up to +-65%: its widths come from the others alone
    assert calibration.widths_for(moved, None) != calibration.widths_for(rows, None)  # in sample they move


def test_stored_rows_give_back_their_residual_band_and_apriori_widths(calibration, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    band = {"discrepancy": {"low": 0.1, "high": 0.1, "residual_scale": 0.5}, "apriori": [0.02, 0.03]}
    band |= {"residual_low_ns": 0.8e9, "residual_high_ns": 1.3e9}
    result = RowResult(
        suite="s", suite_digest="d", kind="llm-foundry", key=RowKey(7, "row 7", "a100_80gb", "1b", 8, 1.1),
        estimator_version="v1", predictor_digest="p", status="ok", predicted_s=1.0, band_low_s=0.85,
        band_high_s=1.2, details={"band": band},
    )  # fmt: skip
    save(result, warehouse)
    (row,) = calibration.warehouse_rows(warehouse)
    assert (row["residual_low"], row["residual_high"]) == (0.8, 1.3)
    assert (row["apriori_low"], row["apriori_high"]) == (0.02, 0.03)
    assert (row["low"], row["high"], row["measured"]) == (0.85, 1.2, 1.1)
