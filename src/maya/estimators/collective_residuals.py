"""Held-out residuals of the collective model: how far measured NCCL times fall from the model's
prediction on a network the fit never saw, shipped as `data/collectives/residuals.json`.

Each measured network of Vidur's collectives is held out in turn (`collective_fit.fit(exclude=...)`) and
priced from its cluster spec and the other networks' figures; the quantiles (10th, 50th, 90th) of
log(measured / predicted) over every held-out row are kept per scope (`intra-node`, `inter-node`) and
message-size band (`collective_data.size_regime`). They are what `maya predict`'s band draws collective
errors from (`maya.simulator.band`). The measurements are all-reduce and send/recv only: other collectives
(all-gather, reduce-scatter: the same rings) take the all-reduce rows' figures.

    python -m maya.estimators.collective_residuals [--dataset collectives.parquet] [--out residuals.json]

Four fits: several minutes on two cores. The file records the dataset's SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.paths import data_dir, write_atomic

from .collective_data import load_collectives, shipped_dataset, size_regime

FORMAT = "maya-collective-residuals/1"
QUANTILES = (0.1, 0.5, 0.9)
SCOPES = ("intra-node", "inter-node")
REGIMES = ("<64KB", "64KB-1MB", "1-16MB", ">=16MB")


def shipped_path() -> Path:
    return data_dir() / "collectives" / "residuals.json"


@dataclass(frozen=True)
class CollectiveResiduals:
    """Quantiles of log(measured / predicted) per (scope, size band) on held-out networks."""

    quantiles: dict[str, dict[str, tuple[float, float, float]]]
    rows: dict[str, dict[str, int]]
    provenance: dict

    def of(self, scope: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """(n, 3) quantiles for collectives of `scope` (per row: 'intra-node' / 'inter-node') and size."""
        regime = size_regime(pd.Series(np.asarray(nbytes, dtype="float64"))).to_numpy()
        out = np.zeros((len(regime), 3))
        for s in SCOPES:
            for r in REGIMES:
                rows = (np.asarray(scope) == s) & (regime == r)
                if rows.any():
                    out[rows] = self.quantiles[s][r]
        return out

    def to_json(self) -> dict:
        return {"format": FORMAT, "quantiles": self.quantiles, "rows": self.rows, "provenance": self.provenance}

    @classmethod
    def from_json(cls, raw: dict) -> CollectiveResiduals:
        if raw.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (format {raw.get('format')!r})")
        return cls(
            {s: {r: tuple(q) for r, q in v.items()} for s, v in raw["quantiles"].items()},
            raw["rows"],
            raw["provenance"],
        )


@lru_cache(maxsize=1)
def shipped_residuals() -> CollectiveResiduals:
    return CollectiveResiduals.from_json(json.loads(shipped_path().read_text()))


def held_out_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Every measured row (copies of another network's curve left out) predicted with its network held out:
    `predicted_us`, `scope`, `regime` and `log_ratio` = log(measured / predicted) added."""
    from .collective_fit import fit, predict

    frame = frame[frame["duplicate_of"].isna()].reset_index(drop=True)
    parts = []
    for network in sorted(frame["network"].unique()):
        held = frame[frame["network"] == network]
        parts.append(held.assign(predicted_us=predict(held, fit(frame, exclude=[network]).params)))
    rows = pd.concat(parts, ignore_index=True)
    return rows.assign(
        scope=np.where(rows["nodes"] > 1, "inter-node", "intra-node"),
        regime=size_regime(rows["bytes"]),
        log_ratio=np.log(rows["measured_us"] / rows["predicted_us"]),
    )


def summarize(rows: pd.DataFrame, provenance: dict) -> CollectiveResiduals:
    """Quantiles per scope and size band; a band with no rows takes its scope's pooled quantiles."""
    quantiles: dict[str, dict[str, tuple[float, float, float]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for scope in SCOPES:
        mine = rows[rows["scope"] == scope]
        if mine.empty:
            raise ValueError(f"no held-out {scope} collectives: the band cannot be built")
        pooled = tuple(round(float(q), 4) for q in np.quantile(mine["log_ratio"], QUANTILES))
        quantiles[scope], counts[scope] = {}, {}
        for regime in REGIMES:
            part = mine.loc[mine["regime"] == regime, "log_ratio"]
            counts[scope][regime] = len(part)
            quantiles[scope][regime] = (
                tuple(round(float(q), 4) for q in np.quantile(part, QUANTILES)) if len(part) else pooled
            )
    return CollectiveResiduals(quantiles, counts, provenance)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        default=shipped_dataset(),
        help="Vidur-layout collectives Parquet (default: the shipped data/vidur/collectives.parquet)",
    )
    parser.add_argument("--out", type=Path, default=shipped_path())
    args = parser.parse_args(argv)
    rows = held_out_rows(load_collectives(args.dataset))
    provenance = {
        "dataset": args.dataset.name,
        "sha256": hashlib.sha256(args.dataset.read_bytes()).hexdigest(),
        "rows": len(rows),
        "split": "leave one network out (collective_fit.fit(exclude=[network]))",
        "networks": sorted(rows["network"].unique()),
    }
    residuals = summarize(rows, provenance)
    write_atomic(args.out, (json.dumps(residuals.to_json(), indent=1, sort_keys=True) + "\n").encode())
    print(f"held-out residuals of {len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
