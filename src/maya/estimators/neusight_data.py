"""NeuSight's measured kernels (`data/neusight/`, MIT) as measured call frames.

NeuSight's columns: `op`, `device` (the name the GPU reports), `latency_ms`, and the op's sizes —
`b, m, n, k` for bmm / linear (b row-major products [m, n] x [n, k]: NeuSight's reduction dimension is `n`;
in the call frame m = NeuSight's k, n = its m, k = its n, `calls.gemm_of_row_major`)
and `b, h` for vector ops (b rows of h elements). All fp32 with TF32 off. Convolutions are not
loaded (no conv family here).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.paths import data_dir

from .calls import gemm_of_row_major
from .launch_floor import ISOLATED

GEMM_OPS = ("bmm", "linear")
BINARY_OPS = ("add", "mul", "div", "pow")
UNARY_OPS = ("addu", "mulu", "divu", "powu", "gelu", "relu", "tanh")
FAMILY_OF_OP = {
    **{op: "gemm" for op in GEMM_OPS},
    **{op: "elementwise" for op in BINARY_OPS + UNARY_OPS},
    "ln": "normalization",
    "softmax": "softmax",
}
REQUIRED = {"gemm": ("b", "m", "n", "k"), "vector": ("b", "h")}


class NeuSightFormatError(ValueError):
    """The file is not in NeuSight's kernel format."""


def neusight_dir() -> Path:
    return data_dir() / "neusight"


def load_kernels(path: str | Path) -> pd.DataFrame:
    """A NeuSight kernel file as measured calls: call-frame columns plus `measured_ns`, `source` and `timing`."""
    return to_calls(pd.read_parquet(path))


def check_complete(calls: pd.DataFrame) -> None:
    """Raise `NeuSightFormatError` naming the first bad row unless every call of `to_calls(...)` has its sizes (finite,
    positive) and a finite positive latency: what a comparison with predictions needs."""
    sizes = {"gemm": ("batch", "m", "n", "k"), "vector": ("numel", "row")}
    for label, columns, rows in (
        ("latency_ms", ("measured_ns",), np.ones(len(calls), bool)),
        ("b, m, n, k", sizes["gemm"], (calls["family"] == "gemm").to_numpy()),
        ("b, h", sizes["vector"], (calls["family"] != "gemm").to_numpy()),
    ):
        values = calls.loc[rows, list(columns)].to_numpy(dtype="float64")
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(values) & (values > 0)).all(axis=1)
        if bad.any():
            first = calls.index[rows][np.flatnonzero(bad)[0]]
            raise NeuSightFormatError(
                f"{int(bad.sum())} row(s) without a finite positive {label} (first: the row of "
                f"{calls.loc[first, 'op']!r} at position {calls.index.get_loc(first)})"
            )


def _numbers(rows: pd.DataFrame, column: str) -> np.ndarray:
    try:
        return rows[column].astype("float64").to_numpy()
    except (ValueError, TypeError):
        bad = next(v for v in rows[column] if not _is_number(v))
        raise NeuSightFormatError(f"column {column!r} holds values that are not numbers (e.g. {bad!r:.40})") from None


def _is_number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def to_calls(raw: pd.DataFrame) -> pd.DataFrame:
    """NeuSight rows (ops this module knows) as measured calls; other ops are left out."""
    missing = sorted({"op", "device", "latency_ms"} - set(raw.columns))
    if missing:
        raise NeuSightFormatError(f"missing column(s) {', '.join(missing)}")
    rows = raw[raw["op"].isin(list(FAMILY_OF_OP))]
    if rows.empty:
        return pd.DataFrame()
    family = rows["op"].map(FAMILY_OF_OP)
    gemm = (family == "gemm").to_numpy()
    needed = set(REQUIRED["gemm"] if gemm.any() else ()) | set(REQUIRED["vector"] if (~gemm).any() else ())
    missing = sorted(needed - set(raw.columns))
    if missing:
        raise NeuSightFormatError(f"missing column(s) {', '.join(missing)} for the ops present")
    b = _numbers(rows, "b")
    size = {c: _numbers(rows, c) if c in rows else np.full(len(rows), np.nan) for c in "mnkh"}
    vector = ~gemm
    return pd.DataFrame(
        {
            "hardware": rows["device"].to_numpy(),
            "family": family.to_numpy(),
            "op": rows["op"].to_numpy(),
            "dtype": "fp32",
            **{
                name: np.where(gemm, value, np.nan)
                for name, value in zip(("batch", "m", "n", "k"), gemm_of_row_major(b, size["m"], size["k"], size["n"]))
            },
            "numel": np.where(vector, b * size["h"], np.nan),
            "row": np.where(vector, size["h"], np.nan),
            "operands": np.where(rows["op"].isin(BINARY_OPS), 2.0, 1.0),
            "measured_ns": _numbers(rows, "latency_ms") * 1e6,
            "source": "neusight",
            "timing": ISOLATED,  # CUDA events around one eager call each (NeuSight's measure_cuda_kernel)
        }
    )
