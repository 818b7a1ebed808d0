"""Measured NCCL collectives (Vidur's `collectives.parquet`) as the collective model reads them.

Each row: `network` (the measured machine), `collective` (Maya's name), `ranks`, `nodes`, `per_node`,
`bytes`, `measured_us` (the median time). Vidur's machines map to cluster specs by `VIDUR_CLUSTERS`; their
inter-node network is not described, so multi-node rows are priced on a network learned for each machine.

Sizes: Vidur records `size` as bytes (`size = elements x 2`, fp16; its profiler's largest message,
4096 x 8192 elements, appears as 67,108,864); the shared Parquet names that column `size_elements`. A
`size_bytes` column is read as is; `size_elements` is read as the bytes it holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.paths import data_dir

from .collectives import priced_name

VIDUR_CLUSTERS = {
    "a100_dgx": "dgx-a100",
    "a100_pairwise_nvlink": "a100-pcie-nvlink-pairs-4gpu",
    "h100_pairwise_nvlink": "h100-nvl-nvlink-pairs-4gpu",
    "a40_pairwise_nvlink": "a40-nvlink-pairs-8gpu",
}
"""Vidur network name -> shipped cluster spec of its nodes."""
REQUIRED = ("network", "collective", "num_workers", "devices_per_node", "time_ms_median")
GROUP = ["network", "collective", "ranks", "per_node"]
"""The columns that name one measured curve (times over sizes)."""


class CollectiveDataError(ValueError):
    """A collectives dataset lacks what the model needs."""


def shipped_dataset() -> Path:
    """Where Maya ships Vidur's collectives (`data/vidur/collectives.parquet`)."""
    return data_dir() / "vidur" / "collectives.parquet"


def load_collectives(path: str | Path) -> pd.DataFrame:
    """The measured collectives of a Vidur-layout Parquet file, with `duplicate_of` naming, for curves that
    repeat another network's measurements value for value, the network they copy (else None)."""
    if not Path(path).is_file():
        raise CollectiveDataError(f"{path}: no such collectives dataset")
    raw = pd.read_parquet(path)
    missing = [c for c in REQUIRED if c not in raw.columns]
    size = "size_bytes" if "size_bytes" in raw.columns else "size_elements"
    if size not in raw.columns:
        missing.append("size_bytes or size_elements")
    if missing:
        raise CollectiveDataError(f"{path}: not a collectives dataset (missing {', '.join(missing)})")
    unknown = sorted(set(raw["network"]) - set(VIDUR_CLUSTERS))
    if unknown:
        raise CollectiveDataError(
            f"{path}: network(s) {', '.join(unknown)} have no cluster spec; known: {', '.join(VIDUR_CLUSTERS)}"
        )
    frame = pd.DataFrame(
        {
            "network": raw["network"].astype(str),
            "collective": raw["collective"].astype(str).map(priced_name),
            "ranks": raw["num_workers"].astype(int),
            "per_node": raw["devices_per_node"].astype(int),
            "bytes": raw[size].astype("float64"),
            "measured_us": raw["time_ms_median"].astype("float64") * 1e3,
        }
    )
    frame["per_node"] = np.minimum(frame["per_node"], frame["ranks"])
    frame["nodes"] = -(-frame["ranks"] // frame["per_node"])
    bad = ~(np.isfinite(frame["measured_us"]) & (frame["measured_us"] > 0) & (frame["bytes"] > 0))
    if bad.any():
        raise CollectiveDataError(f"{path}: {int(bad.sum())} row(s) with a missing or non-positive time or size")
    frame["duplicate_of"] = duplicate_curves(frame)
    return frame.sort_values([*GROUP, "bytes"]).reset_index(drop=True)


def duplicate_curves(frame: pd.DataFrame) -> pd.Series:
    """Per row of a frame with `GROUP`, `bytes` and `measured_us`: the network whose curve of the same collective and layout this row's curve copies exactly
    (the first in name order keeps its own), else None."""
    out = pd.Series(None, index=frame.index, dtype=object)
    curves = {key: rows.sort_values("bytes")[["bytes", "measured_us"]].to_numpy() for key, rows in frame.groupby(GROUP)}
    for key, values in curves.items():
        for other, other_values in curves.items():
            if other[1:] == key[1:] and other[0] < key[0] and np.array_equal(values, other_values):
                out[(frame[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)] = other[0]
                break
    return out


def size_regime(nbytes: pd.Series) -> pd.Series:
    """Message-size band of each row, for reports."""
    return pd.cut(
        nbytes, [0, 64e3, 1e6, 16e6, np.inf], labels=["<64KB", "64KB-1MB", "1-16MB", ">=16MB"], right=False
    ).astype(str)
