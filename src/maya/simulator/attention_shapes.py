"""Attention shapes of fused-attention kernels, in the call-frame vocabulary of the attention family
(`maya.estimators.families.attention`): `batch` = batch x heads, `m` queries, `n` keys, `k` head dimension,
op `<kernel>_<fwd|bwd>[_causal]`, `<kernel>_bwd_preprocess` / `<kernel>_bwd_postprocess` or `<kernel>_fwd_combine`
(a split-KV forward's merge of its partial outputs: `n` is then the number of splits it merges), the kernel `sdpa`
(cuDNN), `flash` (FlashAttention-2 of the flash-attn package: its own kernels, or torch's port of them inside a
`PACKAGE_ATTENTION_RANGES` range, where the port stands in for the package under emulation), `torchflash` (torch's
port, `pytorch_flash::flash_*`, as SDPA's flash backend runs it: measured 2-8% slower than the package, priced so by
`maya.estimators.attention_model`), `efficient` (torch's memory-efficient CUTLASS kernels) or `lftriton` (the
kernels inside a `TRITON_ATTENTION_RANGE`: llm-foundry's Triton flash attention, which SDPA's kernels stand in for
under emulation).

- cuDNN attention graphs carry their shape and mask in `args.attention` (the emulator records them).
- Kernels torch launches itself (its FlashAttention-2 port `pytorch_flash::flash_*_kernel`, the
  memory-efficient `fmha_cutlass*` kernels) carry no shape: it comes from the enclosing attention op's
  input shapes (`ATTENTION_OPS`), and the causal flag from the kernel's own template arguments
  (FlashAttention-2 instantiates `flash_fwd_kernel<Traits, Is_dropout, Is_causal, ...>` and
  `flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Traits, Is_dropout, Is_causal, ...>`): the op's `is_causal`
  is a scalar, which the ops table does not keep. A kernel whose flag cannot be read (the memory-efficient
  kernels take it at run time) is priced without a mask, i.e. for the full work.
- FlashAttention-2's split-KV forward: where batch x heads x query blocks would not fill the GPU, torch's port
  (`mha_fwd`, `num_splits_heuristic`; not with dropout) splits the keys among `flash_fwd_splitkv_kernel<Traits,
  Is_causal, Is_local, ...>` blocks (causal is its first flag), its grid (query blocks, splits, batch x heads), and
  merges their fp32 partial outputs in `flash_fwd_splitkv_combine_kernel`: the split kernel is priced as the forward
  of its shape, the merge as a memory pass over the splits' partial outputs (the grid's splits).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from maya_trace_spec.vocabulary import DTYPE_BYTES, dtype_name

from .distinct import contains, per_distinct
from .trace import RankTrace, listed

ATTENTION_BACKWARD_FLOPS = 2.5
"""Backward attention recomputes QK^T and runs four more products: 2.5 times the forward's FLOPs."""

ATTENTION_OPS: dict[str, tuple[int, int, bool]] = {
    "flash_attn::_flash_attn_forward": (0, 1, False),
    "flash_attn::_flash_attn_backward": (1, 2, False),
    "flash_attn::_flash_attn_varlen_forward": (0, 1, False),
    "flash_attn::_flash_attn_varlen_backward": (1, 2, False),
    "aten::_flash_attention_forward": (0, 1, False),
    "aten::_flash_attention_backward": (1, 2, False),
    "aten::_efficient_attention_forward": (0, 1, False),
    "aten::_efficient_attention_backward": (1, 2, False),
    "aten::_scaled_dot_product_flash_attention": (0, 1, True),
    "aten::_scaled_dot_product_flash_attention_backward": (1, 2, True),
    "aten::_scaled_dot_product_efficient_attention": (0, 1, True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 2, True),
}
"""Attention ops whose kernels carry no shape: positions of the query and key among their inputs, and whether
their layout is [batch, heads, sequence, head dim] (else [batch, sequence, heads, head dim], or packed sequences
[tokens, heads, head dim] bounded by `VARLEN_BOUNDS`)."""

VARLEN_BOUNDS: dict[str, int] = {
    "flash_attn::_flash_attn_varlen_forward": 3,
    "flash_attn::_flash_attn_varlen_backward": 9,
    "aten::_flash_attention_forward": 3,
    "aten::_flash_attention_backward": 6,
}
"""Attention ops that take packed sequences (flash-attn's variable-length calls): the position among their inputs
of the queries' sequence bounds (`cu_seqlens_q`, `cum_seq_q`: sequences + 1 offsets). The lengths are device values
the trace does not keep, so the sequences are priced at their mean length (exact when they are equal, as in packed
pretraining; otherwise a lower bound of the attention's work, which grows with the sum of squared lengths)."""

TRITON_ATTENTION_RANGE = "llmfoundry::triton_flash_attn"
"""A `record_function` range a script opens around attention that ran llm-foundry's Triton flash attention where
it was measured (`data/workloads/mpt.py`, `attn_impl: triton`): the kernels inside, and the backward of the ops
inside, are op `lftriton_*`, priced from that kernel's nearest measured proxy (`maya.estimators.attention_model`)."""
PACKAGE_ATTENTION_RANGES = ("flash_attn_2_cuda::", "flash_attn::", "llmfoundry::flash_attn")
"""Prefixes of the trace ranges and ops inside which torch's FlashAttention-2 port stands in for the flash-attn
package: Maya's stand-in for the package's extension (`emulator/standins/flash_attn_2_cuda.py`, its `RANGE`), the
package's own custom ops around it (2.7 on; what finds its calls in traces made before the stand-in's range) and the
range a script opens around attention that ran the package where it was measured (`data/workloads/mpt.py`,
`attn_impl: flash`). The port's kernels inside, and the backward of the ops inside, are the package's (`flash`), not
the port's."""

_MANGLED_BOOLS = re.compile(r"((?:Lb[01]E){2,})E+v")
_DEMANGLED_BOOLS = re.compile(r"traits<.*>\s*,\s*(true|false)\s*,\s*(true|false)")


def kernel_role(name: str) -> str | None:
    """What a fused-attention kernel does, from its name: `fwd`, `bwd` (the fused kernels), `preprocess`
    (FlashAttention-2's D = rowsum(dO * O)), `postprocess` (dQ, dK/dV converted from fp32), `combine` (a split-KV
    forward's merge of its partial outputs); None: unknown."""
    lower = name.lower()
    if "splitkv_combine" in lower:
        return "combine"
    if "dot_do_o" in lower:
        return "preprocess"
    if "convert_dq" in lower or "convert_dkv" in lower:
        return "postprocess"
    if "flash_bwd" in lower or "cutlassb" in lower:
        return "bwd"
    if "flash_fwd" in lower or "cutlassf" in lower:
        return "fwd"
    return None


def kernel_implementation(name: str) -> str:
    """The call-frame kernel of a fused-attention kernel torch launches: `efficient` (the memory-efficient CUTLASS
    kernels, `fmha_cutlassF/B`, xformers' own), `torchflash` (torch's FlashAttention-2 port, namespace
    `pytorch_flash`) or `flash` (the flash-attn package's FlashAttention-2)."""
    lower = name.lower()
    if "fmha_cutlass" in lower or ("fmha" in lower and "flash" not in lower):
        return "efficient"
    return "torchflash" if "pytorch_flash" in lower else "flash"


def ranged_attention_ops(ops: pd.DataFrame, range_names: tuple[str, ...] = (TRITON_ATTENTION_RANGE,)) -> set[int]:
    """Ids of the attention ops (`ATTENTION_OPS`) inside a range whose name starts with one of `range_names`, and of
    the backward attention ops of those: a backward op's enclosing autograd node carries the sequence number of the
    forward op it differentiates. Without sequence numbers (a trace of another tool) a backward op is found only
    inside such a range itself."""
    in_range = per_distinct(ops["name"], lambda name: str(name).startswith(range_names), False, bool)
    if not in_range.any():
        return set()
    parent = dict(zip(ops["op_id"].tolist(), ops["parent_op_id"].tolist()))
    seq_nr = dict(zip(ops["op_id"], ops["seq_nr"])) if "seq_nr" in ops.columns else {}
    ranges = set(ops.loc[in_range, "op_id"])
    attention = ops[ops["name"].isin(list(ATTENTION_OPS))]

    def ancestors(op_id):
        current, depth = op_id, 0
        while current == current and current is not None and depth <= len(parent):
            yield current
            current, depth = parent.get(current), depth + 1

    def number(op_id) -> float | None:
        value = seq_nr.get(op_id)
        return None if value is None or value != value else value  # NaN: no sequence number

    found, forward_seq = set(), set()
    backward = attention["name"].astype(str).str.endswith("backward").to_numpy()
    for op_id in attention["op_id"].to_numpy()[~backward]:
        if any(a in ranges for a in ancestors(op_id)):
            found.add(op_id)
            if number(op_id) is not None:
                forward_seq.add(number(op_id))
    for op_id in attention["op_id"].to_numpy()[backward]:
        if any(a in ranges for a in ancestors(op_id)):  # a backward call inside the range itself (the stand-in's)
            found.add(op_id)
            continue
        node = next((a for a in ancestors(op_id) if number(a) is not None), None)
        if node is not None and number(node) in forward_seq:
            found.add(op_id)
    return found


def kernel_causal(name: str) -> bool | None:
    """Is_causal of a FlashAttention-2 kernel (the second boolean template argument after its traits, the first of
    the split-KV forward's, which has no dropout flag), mangled or demangled; None when the name does not say."""
    lower = name.lower()
    if "flash_fwd" not in lower and "flash_bwd" not in lower:
        return None
    at = 0 if "splitkv" in lower else 1
    mangled = _MANGLED_BOOLS.findall(name)
    if mangled:
        return mangled[-1].split("E")[at] == "Lb1"
    demangled = _DEMANGLED_BOOLS.search(name)
    return demangled.group(at + 1) == "true" if demangled else None


def kv_splits(calls: pd.DataFrame, i: int) -> float:
    """The splits a split-KV forward call (row `i` of `calls`) runs: its grid's y extent (1 if not recorded)."""
    if "grid_y" not in calls:
        return 1.0
    value = calls["grid_y"].iat[i]
    return float(value) if value == value and value is not None and value >= 1 else 1.0


def op_attention_shapes(ops: pd.DataFrame) -> pd.DataFrame:
    """Per attention op of `ATTENTION_OPS`: batch x heads, queries, keys, head dim, whether it is a backward, and
    its dtype (indexed by op_id)."""
    rows = {}
    names = ops["name"].astype(str)
    keep = names.isin(list(ATTENTION_OPS)).to_numpy(dtype=bool)  # no other op is read
    ops, names = ops[keep], names[keep]
    for op_id, name, shapes, dtypes in zip(
        ops["op_id"].tolist(), names.tolist(), listed(ops["input_shapes"]), listed(ops["input_dtypes"])
    ):
        spec = ATTENTION_OPS.get(name)
        if spec is None or shapes is None or len(shapes) <= spec[1]:
            continue
        q_at, k_at, heads_first = spec
        q, k = shapes[q_at], shapes[k_at]
        if q is None or k is None:
            continue
        if len(q) == 4 and len(k) == 4:
            batch, heads = (q[0], q[1]) if heads_first else (q[0], q[2])
            seq_q, seq_k = (q[2], k[2]) if heads_first else (q[1], k[1])
        elif len(q) == 3 and len(k) == 3 and (packed := _sequences(name, shapes)):
            batch, heads, seq_q, seq_k = packed, q[1], q[0] / packed, k[0] / packed
        else:
            continue
        dtype = dtype_name(dtypes[q_at]) if dtypes is not None and q_at < len(dtypes) else None
        rows[op_id] = (
            float(batch * heads),
            float(seq_q),
            float(seq_k),
            float(q[-1]),
            name.endswith("backward"),
            dtype or "bf16",
        )
    return pd.DataFrame.from_dict(rows, orient="index", columns=["batch", "m", "n", "k", "backward", "dtype"])


def _sequences(name: str, shapes: list) -> int | None:
    """The number of packed sequences of a variable-length attention op (`VARLEN_BOUNDS`), None where it has none."""
    at = VARLEN_BOUNDS.get(name)
    bounds = shapes[at] if at is not None and at < len(shapes) else None
    return bounds[0] - 1 if bounds is not None and len(bounds) == 1 and bounds[0] >= 2 else None


def attention_ancestors(ops: pd.DataFrame, op_ids: np.ndarray) -> dict[int, int]:
    """For each of `op_ids`: the op id of its nearest enclosing op (itself included) of `ATTENTION_OPS`, where
    there is one."""
    parent = dict(zip(ops["op_id"].tolist(), ops["parent_op_id"].tolist()))
    named = set(ops.loc[ops["name"].isin(list(ATTENTION_OPS)), "op_id"])
    found: dict[int, int] = {}
    for op_id in pd.unique(op_ids):
        current, depth = op_id, 0
        while current == current and current is not None and current not in named and depth < len(parent):
            current, depth = parent.get(current), depth + 1
        if current in named:
            found[op_id] = current
    return found


def shape_attention(
    trace: RankTrace, family: np.ndarray, op: np.ndarray, dtype: np.ndarray, num: dict[str, np.ndarray]
) -> None:
    """Attention shape, op, dtype, FLOPs and traffic of every attention call of `trace` (in place): cuDNN graphs
    from their `args`, torch's own kernels from their enclosing op."""
    calls = trace.calls
    args = calls["args"]
    graphs = contains(args, '"attention"')
    for i in np.flatnonzero(graphs):
        a = json.loads(args.iat[i])["attention"]
        kind = dtype_name(a.get("dtype")) or "bf16"
        _set(
            i,
            "sdpa",
            "bwd" if a.get("backward") else "fwd",
            bool(a.get("causal")),
            a["batch"] * a["heads"],
            a["seq_q"],
            a["seq_kv"],
            a["head_dim"],
            kind,
            family,
            op,
            dtype,
            num,
        )
    launched = (
        (family == "attention") & ~graphs & calls["kernel_id"].notna().to_numpy() & calls["op_id"].notna().to_numpy()
    )
    if not launched.any() or not len(trace.ops):
        return
    ops = trace.ops.drop_duplicates("op_id")
    shapes = op_attention_shapes(ops)
    if not len(shapes):
        return
    ancestor = attention_ancestors(ops, calls["op_id"].to_numpy()[launched])
    ranged = ranged_attention_ops(ops)
    packaged = ranged_attention_ops(ops, PACKAGE_ATTENTION_RANGES)
    names = dict(zip(trace.kernels["kernel_id"].tolist(), trace.kernels["name"].astype(str).tolist()))
    by_op = dict(zip(shapes.index.tolist(), shapes.itertuples(index=False)))
    op_ids, kernel_ids = calls["op_id"].to_numpy(), calls["kernel_id"].to_numpy()
    splits: dict[int, float] = {}  # owner op -> the splits of its split-KV forward
    for i in np.flatnonzero(launched):
        owner = ancestor.get(op_ids[i])
        if owner is None or owner not in by_op:
            continue
        s = by_op[owner]
        name = names.get(kernel_ids[i], "")
        role = kernel_role(name) or ("bwd" if s.backward else "fwd")
        keys = s.n
        if role == "fwd" and "splitkv" in name.lower():
            splits[owner] = kv_splits(calls, i)
        elif role == "combine":
            keys = splits.get(owner, 1.0)
        kernel = kernel_implementation(name)
        if owner in ranged:
            kernel = "lftriton"
        elif owner in packaged and kernel == "torchflash":
            kernel = "flash"
        _set(
            i,
            kernel,
            role,
            bool(kernel_causal(name)),
            s.batch,
            s.m,
            keys,
            s.k,
            s.dtype,
            family,
            op,
            dtype,
            num,
        )


def _set(
    i: int,
    kernel: str,
    role: str,
    causal: bool,
    b: float,
    m: float,
    n: float,
    d: float,
    kind: str,
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    num: dict[str, np.ndarray],
) -> None:
    family[i], dtype[i] = "attention", kind
    num["batch"][i], num["m"][i], num["n"][i], num["k"][i] = b, m, n, d
    itemsize = DTYPE_BYTES[kind]
    if role in ("preprocess", "postprocess", "combine"):
        op[i] = f"{kernel}_fwd_combine" if role == "combine" else f"{kernel}_bwd_{role}"
        num["flops"][i] = 0.0
        num["work_bytes"][i] = np.nan  # the family counts its traffic
        return
    backward = role == "bwd"
    op[i] = f"{kernel}_{role}{'_causal' if causal else ''}"
    num["flops"][i] = 4.0 * b * m * n * d * (ATTENTION_BACKWARD_FLOPS if backward else 1.0) * (0.5 if causal else 1.0)
    num["work_bytes"][i] = itemsize * b * (m + n) * d * (4.0 if backward else 2.0)
