"""Kernel-campaign measurements (`maya.profiler.kernels`, one row per config) as measured calls in the
estimators' call frame: a config's median device time (CUDA events) is one call of its op."""

from __future__ import annotations

import numpy as np
import pandas as pd

from maya.estimators.calls import NUMERIC_COLUMNS, gemm_of_row_major
from maya.profiler.kernels.configs import KERNEL_FAMILY, OP_FAMILY

TWO_INPUTS = ("add", "mul", "gelu_bwd", "silu_bwd", "dropout_bwd")
"""Elementwise ops reading two tensors per output element (backward: the gradient and the input)."""


def measurement_calls(rows: pd.DataFrame) -> pd.DataFrame:
    """Call-frame columns (`family`, `op`, `dtype`, shapes) and `measured_ns` of measured configs."""

    def param(name: str) -> pd.Series:
        if name not in rows.columns:
            return pd.Series(np.nan, index=rows.index)
        try:
            return rows[name].astype("float64")
        except (ValueError, TypeError):
            raise ValueError(f"column {name!r} holds values that are not numbers") from None

    tokens, hidden = param("tokens"), param("hidden")
    shapes = {
        "gemm": dict(
            zip(
                ("batch", "m", "n", "k"),  # configs are row-major: output [m, n]
                gemm_of_row_major(param("batch"), param("m"), param("n"), param("k")),
            )
        ),
        "attention": {
            "batch": param("batch") * param("heads"),
            "m": param("seq"),
            "n": param("seq"),
            "k": param("head_dim"),
        },
        "softmax": {"numel": param("rows") * param("cols"), "row": param("cols")},
        "cross_entropy": {"numel": tokens * param("vocab"), "row": param("vocab")},
        "optimizer": {"numel": param("n_params")},
        "memcpy": {"bytes": param("bytes")},
        "memset": {"bytes": param("bytes")},
    }
    rowwise = {"numel": tokens * hidden, "row": hidden}  # [tokens, hidden] activations
    profiler_family = rows["op"].map(OP_FAMILY)
    out = pd.DataFrame(np.nan, index=rows.index, columns=list(NUMERIC_COLUMNS))
    for family in KERNEL_FAMILY:
        here = (profiler_family == family).to_numpy()
        for column, values in shapes.get(family, rowwise).items():
            out.loc[here, column] = values[here]
    out["operands"] = np.where(rows["op"].isin(TWO_INPUTS), 2.0, 1.0)
    tf32 = rows["tf32"].fillna(False).astype(bool) if "tf32" in rows.columns else False
    dtype = rows["dtype"].where(~((profiler_family == "gemm") & (rows["dtype"] == "fp32") & tf32), "tf32")
    out.insert(0, "family", profiler_family.map(KERNEL_FAMILY).fillna(""))
    out.insert(1, "op", rows["op"])
    out.insert(2, "dtype", dtype)
    out["measured_ns"] = param("median_ns")
    return out
