"""The call frame: what the kernel estimators read, one row per device call.

| column | meaning |
|---|---|
| `hardware` | catalog name (`h100-sxm`) or reported device name (`NVIDIA H100 80GB HBM3`) |
| `family` | kernel family (`maya_trace_spec.vocabulary.KERNEL_FAMILIES`) |
| `op` | operation within the family (`bmm`, `linear`, `add`, `layer_norm_fwd`, ...); may be empty |
| `dtype` | element type (`vocabulary.DTYPE_BYTES`); for GEMMs `tf32` selects the TF32 tensor-core peak |
| `batch`, `m`, `n`, `k` | GEMM: `batch` products, cuBLAS's column-major sizes (`GEMM convention` below); |
| | attention: `batch` = batch x heads, `m` query length, `n` key length, `k` head dimension |
| `numel` | elements processed: a reduction's input, otherwise the output (parameters for optimizers; a gather's |
| | output, not its table: `gathered_size`) |
| `row` | length of the normalised / reduced / softmax dimension |
| `operands` | tensor inputs read per output element (elementwise; default 1) |
| `bytes` | copies and memsets: the payload; other families: memory traffic replacing the formula |
| `flops` | FLOPs replacing the family's formula (custom kernels) |

Absent shape columns are NaN. `normalize` fills defaults and checks what is there.

GEMM convention: the sizes cuBLAS is called with, as the emulator records them (`api_calls.gemm_m`, ...).
PyTorch computes a row-major product out[rows, cols] = A[rows, k] · B[k, cols] as the column-major
product outᵀ = Bᵀ · Aᵀ, so `m` = cols (the output's last dimension: a linear layer's output features),
`n` = rows (its leading dimensions: tokens) and `k` = the reduction. A linear layer x[T, in] · W[out, in]ᵀ
is m = out, n = T, k = in; its input gradient dY[T, out] · W[out, in] is m = in, n = T, k = out; its weight
gradient dY[T, out]ᵀ · X[T, in] is m = in, n = out, k = T. Every builder of GEMM calls from row-major
shapes (aten op inputs, NeuSight's and the profiler's configurations) goes through `gemm_of_row_major`;
Vidur's `gemm_m`/`gemm_n` are row-major (tokens, output features) and are swapped the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES

NUMERIC_COLUMNS: tuple[str, ...] = ("batch", "m", "n", "k", "numel", "row", "operands", "bytes", "flops")
TEXT_COLUMNS: tuple[str, ...] = ("hardware", "family", "op", "dtype")
KEY_COLUMNS: tuple[str, ...] = TEXT_COLUMNS + NUMERIC_COLUMNS
"""What identifies a measured shape (exact lookup)."""


class CallFrameError(ValueError):
    """The frame cannot be priced: a required column is missing or a value is not understood."""


MAX_SIZE = 2.0**63
"""Sizes are below 2^63 (no tensor holds more elements or bytes): products of them stay finite."""


def normalize(calls: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """A copy with every call-frame column, defaults filled, numeric columns as float64.

    Raises `CallFrameError` naming the column and a row when `calls` is not a frame, lacks `hardware` or
    `family`, repeats a column, holds sizes that are not numbers, negative, infinite or 2^63 and above, or
    families and dtypes outside the vocabulary."""
    if isinstance(calls, pa.Table):
        frame = calls.to_pandas()
    elif isinstance(calls, pd.DataFrame):
        frame = calls
    else:
        raise CallFrameError(f"a call frame is a pandas DataFrame or a pyarrow Table, not {type(calls).__name__}")
    missing = [c for c in ("hardware", "family") if c not in frame.columns]
    if missing:
        raise CallFrameError(f"missing column(s) {', '.join(missing)}; a call frame needs hardware and family")
    repeated = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]} & set(KEY_COLUMNS))
    if repeated:
        raise CallFrameError(f"column(s) {', '.join(repeated)} given more than once")
    out = pd.DataFrame(
        {
            "hardware": _text(frame, "hardware", ""),
            "family": _text(frame, "family", ""),
            "op": _text(frame, "op", ""),
            "dtype": _text(frame, "dtype", "fp32"),
        },
        index=frame.index,
    )
    for name in NUMERIC_COLUMNS:
        out[name] = _sizes(frame, name) if name in frame.columns else np.nan
    out["operands"] = out["operands"].fillna(1.0)
    _check_values(out, "family", KERNEL_FAMILIES)
    _check_values(out, "dtype", tuple(DTYPE_BYTES))
    return out


def _sizes(frame: pd.DataFrame, name: str) -> pd.Series:
    """Column `name` as float64 sizes (NaN: absent), checked."""
    column = frame[name]
    try:
        values = column.astype("float64")
    except (ValueError, TypeError):
        bad = next(((i, v) for i, v in column.items() if not _number(v)), (None, None))
        raise CallFrameError(
            f"column {name!r} holds values that are not numbers (row {bad[0]!r}: {bad[1]!r:.40})"
        ) from None
    array = values.to_numpy()
    with np.errstate(invalid="ignore"):
        wrong = ~np.isnan(array) & ((array < 0) | (array >= MAX_SIZE))
    if wrong.any():
        row = int(np.flatnonzero(wrong)[0])
        raise CallFrameError(
            f"column {name!r} holds {int(wrong.sum())} size(s) that are negative, infinite or 2^63 "
            f"and above (row {frame.index[row]!r}: {array[row]})"
        )
    return values


def _number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def coded(frame: pd.DataFrame) -> pd.DataFrame:
    """A normalised frame with its text columns as categoricals: cheap to take rows of and to factorize."""
    return frame.astype({name: "category" for name in TEXT_COLUMNS})


def gemm_of_row_major(batch, rows, cols, reduction):
    """(batch, m, n, k) in the call frame's convention (cuBLAS column-major) of `batch` row-major products
    out[rows, cols] = A[rows, reduction] · B[reduction, cols]: m = cols, n = rows (scalars or arrays)."""
    return batch, cols, rows, reduction


INDUCTOR_KINDS: tuple[str, ...] = ("pointwise", "reduction", "persistent_reduction")
"""Inductor's generated (non-template) kernels, whose calls carry the op `inductor_op(kind, backward)`."""


def inductor_op(kind: str, backward: bool = False) -> str:
    """The op of a call to an Inductor-generated kernel of `kind` (`INDUCTOR_KINDS`), forward or backward."""
    if kind not in INDUCTOR_KINDS:
        raise CallFrameError(f"unknown Inductor kernel kind {kind!r}; known: {', '.join(INDUCTOR_KINDS)}")
    return f"inductor_{kind}" + ("_backward" if backward else "")


INDUCTOR_OPS: tuple[str, ...] = tuple(
    inductor_op(kind, backward) for kind in INDUCTOR_KINDS for backward in (False, True)
)
INDUCTOR_ROW_FAMILIES: tuple[str, ...] = ("normalization", "softmax")
"""Row families an Inductor-generated reduction keeps from its name (a fused layer norm, a softmax; any other is a
`reduction`), whose kernels fuse pointwise work around the row's own (`kernel_estimator.fused_rest`)."""


MULTI_TENSOR_OP = "multi_tensor"
"""The op of a call to a multi-tensor kernel sized by its grid (`simulator.multi_tensor`): an elementwise pass over
its lists' chunks, moving the call's `bytes`."""


GATHER_OPS = {"embedding": (0, 1), "index_select": (0, 2), "gather": (0, 2)}
"""Aten ops that gather rows of a table, with the positions of the table and of the indices among their inputs.
Their kernel's work is what they gather (`numel` of the output), not the table, which is their largest input."""


def gathered_size(op: str, shapes, numel: float = np.nan, row: float = np.nan) -> tuple[float, float]:
    """`numel` and `row` of a gather's output from its op's input shapes: `gather`'s output has its index's
    shape; `index_select` (along dimension 0, as embeddings use it) and `embedding` take one table row per
    index. The given `numel`, `row` where the shapes do not say."""
    table_at, index_at = GATHER_OPS[op]
    if shapes is None or len(shapes) <= index_at or shapes[table_at] is None or shapes[index_at] is None:
        return numel, row
    table, index = list(shapes[table_at]), list(shapes[index_at])
    if not table or not index:
        return numel, row
    if op == "gather":
        return float(np.prod(index)), float(index[-1])
    return float(np.prod(index)) * float(np.prod(table[1:])), float(table[-1])


def element_bytes(dtype: pd.Series) -> np.ndarray:
    codes, names = pd.factorize(dtype)
    return np.array([DTYPE_BYTES[n] for n in names], dtype="float64")[codes]


def _text(frame: pd.DataFrame, name: str, default: str) -> pd.Series:
    if name not in frame.columns:
        return pd.Series(default, index=frame.index, dtype="str")
    column = frame[name]
    if column.hasnans:
        column = column.fillna(default)
    return column if column.dtype == "str" else column.astype("str")


def _check_values(frame: pd.DataFrame, column: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(pd.unique(frame[column])) - set(allowed))
    if unknown:
        raise CallFrameError(f"unknown {column} value(s) {', '.join(map(repr, unknown))}; known: {', '.join(allowed)}")
