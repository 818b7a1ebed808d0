"""What each device call does, in the estimators' call-frame vocabulary (`family`, `op`, `dtype`,
`batch`, `m`, `n`, `k`, `numel`, `flops`, and `work_bytes` for their `bytes`; NaN where unknown), a Triton
GEMM template's output tile (`tile_m`, `tile_n`: `launch_shape.py`), plus
the collective columns (`collective`, `comm_bytes`: nccl-tests message size). Built from the call's own columns, its kernel's family and, for
kernels without shapes of their own, the input shapes of the enclosing framework op (attention kernels:
`attention_shapes`); Triton kernels from the arguments of their launch (`triton_work`); Transformer Engine's kernels
from the extension call enclosing them, as the eager kernels of the same work (`te_work`)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from maya.estimators.calls import GATHER_OPS, gathered_size, gemm_of_row_major
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES, MODULE_RANGE_PREFIX, dtype_bytes, dtype_name

from . import multi_tensor, te_work, triton_work
from .attention_shapes import shape_attention
from .distinct import contains, per_distinct
from .opcodes import COLL
from .split_kernels import share_split_pieces
from .trace import RankTrace, listed


def _arrow(values: pd.Series, kind: pa.DataType) -> pa.Array:
    """`values` as one Arrow array of `kind`: without a copy where the column is Arrow already (`trace.ARROW_LISTS`)."""
    if isinstance(values.dtype, pd.ArrowDtype):
        return values.array.__arrow_array__().combine_chunks().cast(kind)
    return pa.array(values.to_numpy(), type=kind, from_pandas=True)


def _largest_inputs(shapes: pd.Series, dtypes: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op (its `input_shapes`, `input_dtypes`): the element count, last dimension and dtype name of its
    largest input tensor of at least one dimension, the first of equal ones (NaN, NaN, None without one).
    Vectorised over every tensor of every op: a trace holds about as many ops as device calls."""
    nested = _arrow(shapes, pa.list_(pa.list_(pa.int64())))
    named = _arrow(dtypes, pa.list_(pa.string()))
    n = len(nested)
    per_op = pc.fill_null(pc.list_value_length(nested), 0).to_numpy()
    tensors = nested.flatten()
    dims = pc.fill_null(pc.list_value_length(tensors), 0).to_numpy()
    values = tensors.flatten().to_numpy(zero_copy_only=False)
    op = np.repeat(np.arange(n), per_op)
    position = np.arange(len(dims)) - np.repeat(np.cumsum(per_op) - per_op, per_op)
    shaped = np.flatnonzero(dims > 0)
    starts = (np.cumsum(dims) - dims)[shaped]
    size = np.multiply.reduceat(values, starts).astype("float64") if len(starts) else np.zeros(0)
    order = np.lexsort((position[shaped], -size, op[shaped]))  # per op, the largest first, then the first
    first = order[np.r_[True, op[shaped][order][1:] != op[shaped][order][:-1]]] if len(order) else order
    chosen_op, chosen_at = op[shaped][first], position[shaped][first]
    numel, row = np.full(n, np.nan), np.full(n, np.nan)
    numel[chosen_op] = size[first]
    row[chosen_op] = values[starts[first] + dims[shaped][first] - 1]
    lengths = pc.fill_null(pc.list_value_length(named), 0).to_numpy()
    spelled = named.flatten().to_numpy(zero_copy_only=False)
    has_dtype = chosen_at < lengths[chosen_op]
    raw = np.full(n, None, dtype=object)
    offsets = np.cumsum(lengths) - lengths
    raw[chosen_op[has_dtype]] = spelled[offsets[chosen_op[has_dtype]] + chosen_at[has_dtype]]
    codes, spellings = pd.factorize(raw)  # None: code -1, the last of `by_code` below
    by_code = np.array([*(dtype_name(spelling) for spelling in spellings), None], dtype=object)
    return numel, row, by_code[codes]


def _op_shapes(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op: its name without the `aten::` prefix, and the element count, last dimension (`row`) and
    dtype of its largest input tensor (`_largest_inputs`)."""
    numel, row, dtype = _largest_inputs(ops["input_shapes"], ops["input_dtypes"])
    names = ops["name"].astype(str).str.replace(r"^aten::", "", regex=True).str.rstrip("_")
    gathers = np.flatnonzero(names.isin(list(GATHER_OPS)).to_numpy())  # sized by what they gather, not the table
    for i, shapes in zip(gathers, listed(ops["input_shapes"].iloc[gathers])):
        numel[i], row[i] = gathered_size(names.iat[i], shapes, numel[i], row[i])
    grouped = np.flatnonzero((names == "_grouped_mm").to_numpy())  # its kernel besides the GEMM (a one-block
    for i, offsets in zip(grouped, listed(ops["input_shapes"].iloc[grouped])):  # setup) reads the group offsets
        if offsets is not None and len(offsets) > 2 and offsets[2] is not None and len(offsets[2]):
            numel[i] = row[i] = float(np.prod(offsets[2]))
    return pd.DataFrame(
        {"op_name": names.to_numpy(), "numel": numel, "row": row, "dtype": dtype}, index=ops["op_id"].to_numpy()
    )


GEMM_OPERANDS = {
    "mm": (0, 1),
    "addmm": (1, 2),
    "bmm": (0, 1),
    "baddbmm": (1, 2),
    "linear": (0, 1),
    "_grouped_mm": (0, 1),
}
"""Positions of the two GEMM operands among the inputs of the aten ops whose kernels are GEMMs."""


def grouped_gemm(a: list, b: list, offsets: list | None) -> tuple[float, float, float, float] | None:
    """(groups, rows, cols, reduction) per group of `torch._grouped_mm(a, b, offs)` from its input shapes,
    the groups' sizes taken equal (offsets are device values; the emulator's routing stand-ins balance them):
    a [T, K] by b [G, K, N] (experts' forward and input gradient: each group T/G of the rows), a [K, T] by
    b [T, N] (weight gradient: each group a T/G slice of the reduction), or a [G, M, K] by b [G, K, N]."""
    groups = float(offsets[0]) if offsets else np.nan
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:
        return float(b[0]), a[0] / b[0], float(b[2]), float(a[1])
    if len(a) == 2 and len(b) == 2 and a[1] == b[0] and groups > 0:
        return groups, float(a[0]), float(b[1]), a[1] / groups
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return float(a[0]), float(a[1]), float(b[2]), float(a[2])
    return None


def _op_gemms(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op that is a GEMM (`GEMM_OPERANDS`): batch, m, n, k from its input shapes, in the call frame's
    (cuBLAS column-major) convention, `gemm_of_row_major` (linear: the weight is [out, in] and leading
    dimensions of the input fold into the output's rows). Kernels of a measured trace carry no GEMM shapes
    of their own; these price them."""
    rows = {}
    names = ops["name"].astype(str)
    gemms = np.flatnonzero(names.str.removeprefix("aten::").isin(list(GEMM_OPERANDS)).to_numpy())  # no other is read
    for op_id, name, shapes in zip(
        ops["op_id"].iloc[gemms], names.iloc[gemms], listed(ops["input_shapes"].iloc[gemms])
    ):
        positions = GEMM_OPERANDS.get(name.removeprefix("aten::"))
        if positions is None or shapes is None or len(shapes) <= max(positions):
            continue
        a, b = (list(shapes[i]) if shapes[i] is not None else [] for i in positions)
        if name.endswith("_grouped_mm"):
            offsets = list(shapes[2]) if len(shapes) > 2 and shapes[2] is not None else None
            grouped = grouped_gemm(a, b, offsets)
            if grouped is not None:
                rows[op_id] = gemm_of_row_major(*grouped)
        elif name.endswith("linear") and len(a) >= 1 and len(b) == 2 and a[-1] == b[1]:
            rows[op_id] = gemm_of_row_major(1.0, float(np.prod(a[:-1])), float(b[0]), float(b[1]))
        elif len(a) == len(b) == 2 and a[1] == b[0]:
            rows[op_id] = gemm_of_row_major(1.0, float(a[0]), float(b[1]), float(a[1]))
        elif len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
            rows[op_id] = gemm_of_row_major(float(a[0]), float(a[1]), float(b[2]), float(a[2]))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["batch", "m", "n", "k"])


def _set_gemms(
    rows: np.ndarray,
    b: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    dtypes: np.ndarray,
    op: np.ndarray,
    num: dict[str, np.ndarray],
) -> None:
    """GEMM op name, shape, FLOPs and operand bytes of `rows` (in place)."""
    itemsize = np.array([DTYPE_BYTES.get(d, 4) for d in dtypes], dtype="float64")
    op[rows] = np.where(b > 1, "bmm", "mm")
    num["batch"][rows], num["m"][rows], num["n"][rows], num["k"][rows] = b, m, n, k
    num["flops"][rows] = 2 * b * m * n * k
    num["work_bytes"][rows] = itemsize * b * (m * k + k * n + m * n)


DROPOUT_KERNELS = {
    "native_dropout": re.compile(r"(?<!apex_)fused_dropout_kernel"),
    "native_dropout_backward": re.compile(r"masked_scale_kernel"),
}
"""torch's dropout ops and their kernels: the forward (`fused_dropout_kernel(_vec)`, which traces captured before
`vocabulary` named it hold as `other`) reads its input and writes its output and a one-byte mask, the backward
(`masked_scale_kernel`) reads the gradient and the mask and writes the input's gradient. Any other kernel such an op
launches (a copy when not training) keeps its own family."""


def _dropout_work(
    launched: np.ndarray, kernel_names: np.ndarray, family: np.ndarray, op: np.ndarray, dtype: np.ndarray, num: dict
) -> None:
    """torch's dropout kernels (`DROPOUT_KERNELS`) framed as the elementwise add moving their bytes (in place)."""
    rows = launched & np.isin(op, list(DROPOUT_KERNELS))
    for i in np.flatnonzero(rows):
        rows[i] = bool(DROPOUT_KERNELS[op[i]].search(str(kernel_names[i])))
    if not rows.any():
        return
    itemsize = np.array([DTYPE_BYTES.get(d, 4) for d in dtype[rows]], dtype="float64")
    family[rows] = "elementwise"
    multi_tensor.frame_as_add(num["numel"][rows] * (2 * itemsize + 1), dtype, num, rows)


def _own_sizes(calls: pd.DataFrame, launched: np.ndarray, numel: np.ndarray) -> None:
    """Library kernels that carry their own element count (`args.elements`: a cuDNN RNN's cell kernel
    per time step, where the enclosing op's shapes cover all steps) are sized by it (in place)."""
    args = calls["args"]
    sized = launched & contains(args, '"elements"')
    for i, text in zip(np.flatnonzero(sized), args[sized].tolist()):
        numel[i] = float(json.loads(text)["elements"])


def _transfer_kind(api: object) -> str:
    """ "memset" or "memcpy" for an API name that holds it (any case), else ""."""
    name = str(api).lower()
    return "memset" if "memset" in name else "memcpy" if "memcpy" in name else ""


def _codes_map(values: pd.Series, table: dict, default=None) -> np.ndarray:
    """`table[value]` for each value (one dictionary lookup per distinct value)."""
    return per_distinct(values, lambda value: table.get(value, default), default)


def work_frame(trace: RankTrace, opcodes: np.ndarray) -> pd.DataFrame:
    """One row per call of `trace` (same order); device calls get a family, shapes and work."""
    calls = trace.calls
    n = len(calls)
    family = np.full(n, None, dtype=object)
    op = np.full(n, "", dtype=object)
    dtype = np.full(n, "fp32", dtype=object)
    num = {
        c: np.full(n, np.nan)
        for c in ("batch", "m", "n", "k", "numel", "row", "operands", "work_bytes", "flops", "tile_m", "tile_n")
    }
    not_coll = opcodes != COLL
    # kernels: family by kernel id, shape from the enclosing op
    launched = calls["kernel_id"].notna().to_numpy() & not_coll
    families = dict(zip(trace.kernels["kernel_id"], trace.kernels["family"])) if len(trace.kernels) else {}
    kernel_family = _codes_map(calls["kernel_id"], families, "other")
    family[launched] = np.where(np.isin(kernel_family, KERNEL_FAMILIES), kernel_family, "other")[launched]
    if len(trace.ops) and launched.any():
        ops = trace.distinct_ops(["op_id", "name", "input_shapes", "input_dtypes"])
        shapes = _op_shapes(ops)
        where = trace.call_ops()[1]  # each call's op among `shapes` (-1: none)
        enclosed = launched & (where >= 0)
        at = where[enclosed]
        name_codes, op_names = pd.factorize(shapes["op_name"])  # names by code: no string per call
        op[enclosed] = np.array([*op_names, ""], dtype=object)[name_codes[at]]
        # traces captured before gather kernels were classified as embedding lookups (`vocabulary`)
        family[launched & np.isin(op, list(GATHER_OPS)) & (family == "elementwise")] = "embedding"
        num["numel"][enclosed] = shapes["numel"].to_numpy()[at]
        num["row"][enclosed] = shapes["row"].to_numpy()[at]
        _own_sizes(calls, launched, num["numel"])
        names = dict(zip(trace.kernels["kernel_id"], trace.kernels["name"])) if len(trace.kernels) else {}
        share_split_pieces(calls, names, launched, num["numel"])
        op_dtype = shapes["dtype"].to_numpy()
        known = enclosed.copy()
        known[enclosed] = pd.notna(op_dtype[at])
        dtype[known] = op_dtype[where[known]]
        kernel_names = _codes_map(calls["kernel_id"], names, "")
        _dropout_work(launched, kernel_names, family, op, dtype, num)
        te_work.fill(calls, kernel_names, launched, family, op, dtype, num)
        multi_tensor.fill(calls, kernel_names, launched, family, op, dtype, num)
        unshaped = launched & (family == "gemm") & calls["gemm_m"].isna().to_numpy()  # measured traces' GEMMs
        if unshaped.any():
            gemms = _op_gemms(ops).reindex(calls["op_id"].to_numpy())
            shaped = unshaped & gemms["m"].notna().to_numpy()
            _set_gemms(shaped, *(gemms[c].to_numpy()[shaped] for c in ("batch", "m", "n", "k")), dtype[shaped], op, num)
    # copies and memsets
    kind = per_distinct(calls["api"], _transfer_kind, "")
    copy = (kind != "") & calls["bytes"].notna().to_numpy() & not_coll
    family[copy] = "copy"
    memset = kind == "memset"
    op[copy] = np.where(memset, "memset", calls["memcpy_kind"].fillna("DtoD").astype(str).to_numpy())[copy]
    num["work_bytes"][copy] = calls["bytes"].to_numpy(dtype="float64", na_value=np.nan)[copy]
    dtype[copy] = "u8"
    # GEMMs
    gemm = calls["gemm_m"].notna().to_numpy()
    if gemm.any():
        g = calls.loc[gemm]
        kind = _codes_map(g["gemm_dtype_a"], {d: dtype_name(d) for d in g["gemm_dtype_a"].unique()}, None)
        kind = np.where(pd.isna(kind), "fp32", kind)
        kind = np.where((kind == "fp32") & (g["gemm_compute_type"] == "tf32").to_numpy(), "tf32", kind)
        family[gemm], dtype[gemm] = "gemm", kind
        _set_gemms(
            gemm,
            *(g[c].to_numpy(dtype="float64", na_value=1.0) for c in ("gemm_batch", "gemm_m", "gemm_n", "gemm_k")),
            kind,
            op,
            num,
        )
    shape_attention(trace, family, op, dtype, num)
    if launched.any() and len(trace.kernels):  # a Triton launch's own arguments over its enclosing op's shapes
        names = _codes_map(calls["kernel_id"], dict(zip(trace.kernels["kernel_id"], trace.kernels["name"])), "")
        triton_work.fill(calls, names, family, op, dtype, num)
    collective, comm_bytes = _collectives(calls, opcodes)
    return pd.DataFrame(
        {
            "family": family,
            "op": op,
            "dtype": dtype,
            **num,
            "collective": collective,
            "comm_bytes": comm_bytes,
            "recomputed": recomputed(trace),
        }
    )


def recomputed(trace: RankTrace) -> np.ndarray:
    """Per call: whether it belongs to a forward pass run again in the backward pass (activation
    recomputation): its op is in the backward phase, under a module's forward range
    (`vocabulary.MODULE_RANGE_PREFIX`) that opened in the backward phase. Torch's checkpointing (reentrant or
    not) and Megatron's re-run the modules there; the backward's own ops are under no such range, even where a
    producer attributes them to a module (`module_path`)."""
    calls = trace.calls
    if not len(trace.ops) or not len(calls) or not {"phase", "parent_op_id"} <= set(trace.ops.columns):
        return np.zeros(len(calls), dtype=bool)
    ops = trace.distinct_ops(["op_id", "name", "phase", "parent_op_id"])
    backward = ops["phase"].eq("backward").fillna(False).to_numpy(dtype=bool)
    inside = backward & ops["name"].astype(str).str.startswith(MODULE_RANGE_PREFIX).to_numpy()
    ids = pd.Index(ops["op_id"])
    parent = ids.get_indexer(ops["parent_op_id"])
    up = parent.copy()
    pending = np.flatnonzero(backward & ~inside & (up >= 0))
    for _ in range(len(ops)):  # one level of ancestors per pass; the bound stops a malformed cycle
        if not len(pending):
            break
        above = up[pending]
        found = inside[above]
        inside[pending[found]] = True
        up[pending] = parent[above]
        pending = pending[~found & (up[pending] >= 0)]
    where = trace.call_ops()[1]
    return np.where(where >= 0, inside[where], False)


def _collectives(calls: pd.DataFrame, opcodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collective name and nccl-tests message size per call: the buffer; all-gather the gathered output."""
    n = len(calls)
    collective, comm_bytes = np.full(n, None, dtype=object), np.full(n, np.nan)
    coll = opcodes == COLL
    if not coll.any():
        return collective, comm_bytes
    c = calls.loc[coll]
    name = c["collective_name"].astype(str).str.lower().str.replace("_", "", regex=False)
    inputs = c["in_msg_nelems"].to_numpy(dtype="float64", na_value=np.nan)
    outputs = c["out_msg_nelems"].to_numpy(dtype="float64", na_value=np.nan)
    size = np.where((name == "allgather").to_numpy() & ~np.isnan(outputs), outputs, np.nan_to_num(inputs))
    elem = _codes_map(c["comm_dtype"], {d: dtype_bytes(d, 4) for d in c["comm_dtype"].unique()}, 4)
    collective[coll] = name.to_numpy()
    comm_bytes[coll] = size * elem.astype("float64")
    return collective, comm_bytes
