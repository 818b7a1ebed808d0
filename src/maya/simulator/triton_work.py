"""The work of Triton kernels, from the launch arguments the emulator recorded (`api_calls.args.triton`).

Inductor names its kernels by kind and its templates' tensors by role, so:
- pointwise (`triton_poi_*`): `numel` = the product of the `*numel` scalars (`xnumel`, `ynumel`, ...);
- reductions (`triton_red_*`, `triton_per_*`): `numel` = kept x reduced elements, `row` = the reduced
  elements (`r0_numel` x `r1_numel`);
- these generated kernels are priced as the eager kernel of the same work (`inductor_work`): a pointwise
  kernel as torch's vectorized add moving its bytes, whatever its name fuses (a `native_layer_norm`,
  `embedding` or `_to_copy` pointwise kernel is a pointwise kernel: torch's eager cast is the same vectorized
  kernel, and the copy family's unmeasured roofline, the spec sheet's bandwidth, is a rate no measured kernel
  reaches); a reduction as the layer norm or softmax its name says it is, else as a reduction; no tensor
  counts more bytes than the kernel's elements (a gathered table, a view of a larger buffer: `_traffic`);
- matmul templates (tensors `arg_A`, `arg_B`): `batch` and the output's rows and columns from the output,
  the reduction from A's size, in the call frame's (cuBLAS) convention (`gemm_of_row_major`);
  convolution templates (`arg_X`, `arg_W`): the implicit GEMM; both with `flops` = 2 batch m n k and their
  config's output tile (`tile_m`, `tile_n` from `BLOCK_M`, `BLOCK_N`: `launch_shape.py`);
- flex-attention templates (`arg_Q`, `arg_K`, `arg_V`; backward with `arg_DO`): the attention shape with `n`
  the keys a query row computes on average, from the blocks the BlockMask has the kernel compute (`flex_blocks`);
  FLOPs count only those blocks;
- any other kernel (user kernels, foreach kernels): `numel` = the largest tensor's elements; a kernel with
  integer arguments `M`, `N`, `K` (the Triton tutorials' convention) is a GEMM; a user kernel otherwise is
  priced as Inductor's generated kernel of the same work (`user_work`: a row kernel where its name says
  normalization or softmax, else the add moving its bytes), unless its source calls `tl.dot` (the launch's `dot`:
  a GEMM-like kernel, Liger's fused SwiGLU and MoE ones, priced from its name and bytes, its FLOPs not counted).
Every kernel's memory traffic (`work_bytes`) is the bytes of its tensor arguments, read or written once, twice
where the kernel does both (the `access` the emulator read from a `@triton.jit` kernel's source; without it,
Inductor's `in_out_ptr*`); `dtype` is the element type holding most of those bytes.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import pandas as pd

from maya.estimators.calls import INDUCTOR_ROW_FAMILIES, gemm_of_row_major, inductor_op
from maya_trace_spec.vocabulary import classify_kernel, dtype_name

from .attention_shapes import ATTENTION_BACKWARD_FLOPS
from .distinct import contains, per_distinct

NUMEL_ARGS = ("xnumel", "ynumel", "znumel")
REDUCED_ARGS = ("r0_numel", "r1_numel", "rnumel")
INDUCTOR_PREFIXES = {"triton_poi_": "pointwise", "triton_red_": "reduction", "triton_per_": "persistent_reduction"}
"""Inductor's generated (non-template) kernels' kinds (`INDUCTOR_KINDS`) by name prefix: their call's op is
`inductor_op(kind)`, which each family prices as its eager kernel of the same work (`FamilyPredictor.same_kernel`)."""


def _tensors(args: list[dict]) -> dict[str, dict]:
    return {a["name"]: a for a in args if "shape" in a}


def _scalars(note: dict) -> dict[str, float]:
    values = {k: v for k, v in note.get("constexprs", {}).items() if isinstance(v, (int, float))}
    values.update(
        {
            a["name"]: a["value"]
            for a in note.get("args", ())
            if isinstance(a.get("value"), (int, float)) and not isinstance(a.get("value"), bool)
        }
    )
    return values


def _numel(shape: list[int]) -> float:
    return float(math.prod(shape))


ACCESSES = ("read", "write", "read-write")
"""The `access` values a launch's tensor may carry (spec 1.6); any other is not used (the name rule prices it)."""


def _passes(name: str, tensor: dict) -> float:
    """Times a kernel moves a tensor argument: a user kernel's recorded `access` (`emulator/triton_access.py`:
    "read-write" twice, read or written once; `describe` drops it from Inductor's kernels), else twice for Inductor's
    `in_out_ptr*` and once for any other."""
    access = tensor.get("access")
    if access in ACCESSES:
        return 2.0 if access == "read-write" else 1.0
    return 2.0 if name.startswith("in_out_ptr") else 1.0


def _traffic(tensors: dict[str, dict], elements: float = math.inf) -> tuple[float, str | None]:
    """Bytes of the tensor arguments (read and written ones twice: `_passes`), none counting more than `elements` of
    its own, and the dtype holding most of them."""
    per_dtype: dict[str, float] = {}
    for name, t in tensors.items():
        size = float(t.get("bytes", 0))
        if size and math.isfinite(elements):
            size = min(size, elements * size / max(_numel(t.get("shape", [])), 1.0))
        size *= _passes(name, t)
        kind = dtype_name(t.get("dtype")) or "u8"
        per_dtype[kind] = per_dtype.get(kind, 0.0) + size
    if not per_dtype:
        return np.nan, None
    return sum(per_dtype.values()), max(per_dtype, key=per_dtype.get)


def _output(tensors: dict[str, dict]) -> dict | None:
    outs = [t for name, t in tensors.items() if name.startswith(("out_ptr", "in_out_ptr"))]
    return outs[0] if outs else (list(tensors.values())[-1] if tensors else None)


def _gemm(a: dict, out: dict, flops_dtype: str | None, tf32: bool) -> dict:
    """A matmul template: batch and m, n from the output, k from A's elements."""
    shape = out["shape"]
    m, n = (float(shape[-2]), float(shape[-1])) if len(shape) >= 2 else (1.0, float(shape[-1]) if shape else 1.0)
    batch = _numel(shape[:-2]) if len(shape) > 2 else 1.0
    a_batch = _numel(a["shape"][:-2]) if len(a["shape"]) > 2 else 1.0
    k = _numel(a["shape"]) / (a_batch * m) if m else np.nan
    kind = dtype_name(a.get("dtype")) or flops_dtype or "fp32"
    batch, m, n, k = gemm_of_row_major(batch, m, n, k)
    return {
        "family": "gemm",
        "op": "bmm" if batch > 1 else "mm",
        "dtype": "tf32" if kind == "fp32" and tf32 else kind,
        "batch": batch,
        "m": m,
        "n": n,
        "k": k,
        "flops": 2.0 * batch * m * n * k,
    }


def _convolution(x: dict, w: dict, out: dict, tf32: bool) -> dict:
    """A convolution template as its implicit GEMM: m = output pixels, n = output channels, k = C_in/groups x
    kernel size."""
    channels = float(w["shape"][0]) if w["shape"] else 1.0
    m, k = _numel(out["shape"]) / channels, _numel(w["shape"]) / channels
    kind = dtype_name(x.get("dtype")) or "fp32"
    _, m, n, k = gemm_of_row_major(1.0, m, channels, k)
    return {
        "family": "gemm",
        "op": "mm",
        "dtype": "tf32" if kind == "fp32" and tf32 else kind,
        "batch": 1.0,
        "m": m,
        "n": n,
        "k": k,
        "flops": 2.0 * m * n * k,
    }


FLEX_BLOCK = 128
"""FlexAttention's default BlockMask block size (`_DEFAULT_SPARSE_BLOCK_SIZE`), where a launch names none."""
KV_COUNTS = ("arg_KV_NUM_BLKS", "arg_FULL_KV_NUM_BLKS")
"""The forward's (and the backward's dQ loop's) per-query-block counts of partial and full key/value blocks."""
MASK_COUNTED = "counted"
MASK_DOCUMENTS = "document-causal stand-in"
MASK_CAUSAL = "causal stand-in"
STAND_IN_DOCUMENTS_SEED = 0


def causal_blocks(q_len: int, kv_len: int, q_block: int, kv_block: int, window: int | None = None) -> int:
    """Blocks a causal mask (`q >= kv`; with `window`, also `q - kv < window`) has a flex kernel compute."""
    return document_blocks(np.zeros(max(q_len, kv_len), dtype=np.int64), q_len, kv_len, q_block, kv_block, window)


def document_blocks(
    documents: np.ndarray, q_len: int, kv_len: int, q_block: int, kv_block: int, window: int | None = None
) -> int:
    """Blocks a causal document mask (`q >= kv` and `documents[q] == documents[kv]`, `documents` non-decreasing
    per token; with `window`, also `q - kv < window`) has a flex kernel compute: the (query block, key block)
    pairs holding at least one allowed pair of tokens, exactly. Queries and keys index the same sequence, the
    queries its last `q_len` tokens' positions from 0 (self-attention: `q_len == kv_len`)."""
    q = np.arange(q_len, dtype=np.int64)
    starts = np.searchsorted(documents, documents[:q_len], side="left")  # first token of each query's document
    low = np.maximum(starts, q - window + 1) if window else starts
    high = np.minimum(q, kv_len - 1)
    lo_b, hi_b = low // kv_block, high // kv_block
    valid = high >= low
    # a query block computes the union of its queries' key-block ranges; both ends never decrease with q
    previous = np.concatenate([[-1], hi_b[:-1]])
    previous[q % q_block == 0] = -1  # a new query block starts with no key block counted
    new = np.where(valid, hi_b - np.maximum(lo_b, previous + 1) + 1, 0)
    return int(np.clip(new, 0, None).sum())


def stand_in_documents(tokens: int) -> np.ndarray:
    """Document ids of `tokens` packed tokens with documents of the synthetic shards' lengths
    (`maya.core.fineweb_shards`: log-normal, mean 700 tokens)."""
    from maya.core.fineweb_shards import document_lengths

    lengths = document_lengths(tokens // 100 + 16, STAND_IN_DOCUMENTS_SEED)
    while lengths.sum() < tokens:
        lengths = np.concatenate([lengths, lengths])
    return np.repeat(np.arange(len(lengths)), lengths)[:tokens]


@lru_cache(maxsize=256)
def stand_in_blocks(q_len: int, kv_len: int, q_block: int, kv_block: int, documents: bool) -> float:
    """Blocks per batch and head of a mask the trace does not give: causal, over documents if `documents`.
    Queries fewer than the keys are a shard of the keys' sequence (context parallelism: each rank's queries
    against the all-gathered keys and values) and compute their share, `q_len / kv_len`, of the whole
    sequence's blocks, as a load-balanced shard does (torch's head-tail and PTRR balancers: with 2 ranks a
    rank's first and last quarters); an unbalanced shard's count depends on its place, which the launch does
    not say."""
    if q_len < kv_len:
        return stand_in_blocks(kv_len, kv_len, q_block, kv_block, documents) * q_len / kv_len
    if documents:
        return document_blocks(stand_in_documents(max(q_len, kv_len)), q_len, kv_len, q_block, kv_block)
    return causal_blocks(q_len, kv_len, q_block, kv_block)


def _block_sizes(scalars: dict[str, float]) -> tuple[int, int]:
    """A flex launch's BlockMask block sizes (queries, keys)."""
    return int(scalars.get("SPARSE_Q_BLOCK_SIZE", FLEX_BLOCK)), int(scalars.get("SPARSE_KV_BLOCK_SIZE", FLEX_BLOCK))


def flex_blocks(tensors: dict[str, dict], note: dict, scalars: dict[str, float], m: int, n: int) -> tuple[float, str]:
    """Blocks a flex-attention launch computes per batch and head, and where the count comes from:
    - `counted`: the BlockMask's counts the emulator read (`block_counts`: masks the host could compute,
      such as `create_block_mask` outside `torch.compile`; a data-dependent mask built from tokens the
      script copied to the device too);
    - else a stand-in (the mask's counts are values only a GPU computes, e.g. a BlockMask built inside a
      compiled model): a causal document mask over the synthetic shards' document lengths
      (`stand_in_documents`) where the kernel takes a per-token integer tensor of the queries' or the keys'
      length, one row or one per sequence (the document ids its mask reads, over the whole sequence under context
      parallelism: `_document_ids`), else a
      causal mask; a sliding window is not applied (an upper bound); a query shard computes its share of the
      whole sequence's blocks (`stand_in_blocks`).
    `m`, `n`: the launch's queries and keys (`flex_shape`)."""
    q_block, kv_block = _block_sizes(scalars)
    counts = note.get("block_counts") or {}
    mask = tensors.get(KV_COUNTS[0])
    if KV_COUNTS[0] in counts and mask is not None:
        rows = _numel(mask["shape"][:-1]) or 1.0  # [batch, heads] of the mask (1 where broadcast)
        return sum(counts.get(name, 0) for name in KV_COUNTS) / rows, MASK_COUNTED
    documents = any(
        _document_ids(t, m, n, tensors.get("arg_Q")) for name, t in tensors.items() if not name.startswith("arg_")
    )
    return float(stand_in_blocks(m, n, q_block, kv_block, documents)), MASK_DOCUMENTS if documents else MASK_CAUSAL


def _document_ids(tensor: dict, m: int, n: int, query: dict | None) -> bool:
    """Whether a tensor a flex launch's mask reads is per-token document ids: integers over the queries' or the
    keys' tokens, one row (a packed sequence: modded-nanogpt) or one per sequence of the batch (torchtitan's
    `[batch, tokens]`; the batch is Q's first dimension)."""
    shape = tensor["shape"]
    if (
        not str(tensor.get("dtype", "")).startswith(("int", "uint"))
        or len(shape) not in (1, 2)
        or shape[-1] not in (m, n)
    ):
        return False
    return len(shape) == 1 or query is None or shape[0] == query["shape"][0]


def flex_shape(tensors: dict[str, dict], scalars: dict[str, float]) -> tuple[float, float, float, float]:
    """Batch x heads, queries, keys and head dimension of a flex launch. Inductor may pass Q/K/V in their buffers'
    layout ([batch, tokens, heads, dim]), so queries and batch x heads come from the log-sum-exp ([batch, heads,
    queries]), and keys from the dimension of K that fills the BlockMask's key blocks (`arg_KV_IDX`'s last);
    without those, [batch, heads, tokens, dim]."""
    q, key = tensors["arg_Q"]["shape"], tensors["arg_K"]["shape"]
    d = float(scalars.get("QK_HEAD_DIM", q[-1]))
    lse = tensors.get("arg_LSE")
    if lse is None or not lse["shape"]:
        return _numel(q[:-2]), float(q[-2]), float(key[-2]), d
    batch, m = _numel(lse["shape"][:-1]), float(lse["shape"][-1])
    n = float(key[-2])
    indices = tensors.get("arg_KV_IDX")
    if indices is not None and indices["shape"]:
        kv_block = float(scalars.get("SPARSE_KV_BLOCK_SIZE", FLEX_BLOCK))
        blocks = float(indices["shape"][-1])
        fits = [float(x) for x in key[1:-1] if (blocks - 1) * kv_block < x <= blocks * kv_block]
        n = fits[0] if fits else n
    return batch, m, n, d


def _attention(tensors: dict[str, dict], note: dict, scalars: dict[str, float]) -> dict:
    """A flex-attention template: `n` the keys each query computes on average (its BlockMask's computed blocks x
    the block's elements / queries, at most the dense count), so FLOPs count only computed blocks."""
    backward = "arg_DO" in tensors
    batch, m, n, d = flex_shape(tensors, scalars)
    blocks, source = flex_blocks(tensors, note, scalars, int(m), int(n))
    q_block, kv_block = _block_sizes(scalars)
    keys = min(n, blocks * min(q_block, m) * min(kv_block, n) / m) if m else n
    return {
        "family": "attention",
        "op": "flex_bwd" if backward else "flex_fwd",
        "dtype": dtype_name(tensors["arg_Q"].get("dtype")) or "bf16",
        "batch": batch,
        "m": m,
        "n": keys,
        "k": d,
        "flops": 4.0 * batch * m * keys * d * (ATTENTION_BACKWARD_FLOPS if backward else 1.0),
        "mask": source,
    }


def is_inductors(kernel: str) -> bool:
    """Whether a kernel is Inductor's (generated, a template, a foreach kernel), by its name: Inductor names every
    kernel it generates `triton_<kind>_...`, or compiles it under its placeholder `triton_` (torch 2.5) with that name
    in the launch's `name`. Its tensors' roles are in their names (`in_out_ptr*` read and written), so a recorded
    `access` is not used for it: only a user kernel's is (`_passes`)."""
    return kernel.lower().startswith("triton_")


@lru_cache(maxsize=4096)
def describe(kernel: str, text: str, backward: bool = False) -> dict:
    """Call-frame values (family, op, dtype, numel, row, operands, batch, m, n, k, flops, work_bytes; flex
    attention's `mask`: where its block count comes from) of one Triton launch: `kernel` its name (Inductor's
    own where the launch records one: a kernel compiled under Inductor's shared placeholder name, torch 2.5's
    default, is `triton_` on the device), `text` its `args` JSON, `backward` whether it runs in a backward pass.
    Keys it cannot tell are absent."""
    note = json.loads(text)["triton"]
    kernel = note.get("name") or kernel
    lower = kernel.lower()
    args = note.get("args", [])
    tensors = _tensors(args)
    if is_inductors(lower):  # priced by its arguments' roles, never by a recorded `access`
        tensors = {name: {k: v for k, v in t.items() if k != "access"} for name, t in tensors.items()}
    scalars = _scalars(note)
    traffic, kind = _traffic(tensors)
    out: dict = {"work_bytes": traffic, "op": "triton"}
    if kind is not None:
        out["dtype"] = kind
    tf32 = bool(note.get("constexprs", {}).get("ALLOW_TF32"))
    output = _output(tensors)
    # BLOCK_M tiles the output's rows and BLOCK_N its columns: the call frame's n and m (`gemm_of_row_major`).
    tile = (
        {"tile_m": float(scalars["BLOCK_N"]), "tile_n": float(scalars["BLOCK_M"])}
        if "BLOCK_M" in scalars and "BLOCK_N" in scalars
        else {}
    )
    if "arg_Q" in tensors and "arg_K" in tensors:
        out.update(_attention(tensors, note, scalars))
    elif "arg_A" in tensors and "arg_B" in tensors and output is not None:
        out.update(_gemm(tensors["arg_A"], output, kind, tf32), **tile)
    elif "arg_X" in tensors and "arg_W" in tensors and output is not None:
        out.update(_convolution(tensors["arg_X"], tensors["arg_W"], output, tf32), **tile)
    elif all(isinstance(scalars.get(c), (int, float)) for c in "MNK") and not is_inductors(lower):
        _, m, n, k = gemm_of_row_major(1.0, *(float(scalars[c]) for c in "MNK"))
        out.update(family="gemm", op="mm", batch=1.0, m=m, n=n, k=k, flops=2.0 * m * n * k)
    else:
        kept = math.prod(float(scalars[c]) for c in NUMEL_ARGS if c in scalars)
        reduced = math.prod(float(scalars[c]) for c in REDUCED_ARGS if c in scalars)
        has_numel = any(c in scalars for c in NUMEL_ARGS)
        if any(c in scalars for c in REDUCED_ARGS):
            out.update(numel=kept * reduced, row=reduced)
        elif has_numel:
            out["numel"] = kept
        elif tensors:
            out["numel"] = max(_numel(t["shape"]) for t in tensors.values())
        inputs = [name for name in tensors if name.startswith(("in_ptr", "in_out_ptr"))]
        if inputs:
            out["operands"] = float(len(inputs))
        generated = next((k for prefix, k in INDUCTOR_PREFIXES.items() if lower.startswith(prefix)), None)
        if generated is not None and has_numel:
            out.update(inductor_work(kernel, generated, tensors, out["numel"], backward))
        elif generated is None and tensors and not is_inductors(lower) and not note.get("dot"):
            out.update(user_work(kernel, tensors, out["numel"], backward))  # GEMM-like (`dot`): priced by its bytes
    return out


USER_POINTWISE_FAMILIES = ("other", "elementwise")
"""Families a user kernel's name may give (`classify_kernel`) that `user_work` prices as a pointwise kernel."""


def user_work(kernel: str, tensors: dict[str, dict], numel: float, backward: bool) -> dict:
    """Family, op, row and traffic of a user `@triton.jit` kernel with no GEMM shape over `numel` elements (its largest
    tensor's), priced as Inductor's generated kernels of the same work are (`inductor_work`), not at the spec sheet's
    bandwidth, which no measured kernel reaches:
    - a kernel its name says is a normalization or a softmax (Liger's `_rms_norm_forward_kernel`) as that row kernel,
      each program one row of the largest tensor's last dimension (Triton's tutorials' and Liger's `n_cols`);
    - a kernel of no family or an elementwise one (Liger's SwiGLU, RoPE, cross-entropy) as the add moving its bytes,
      with the tensors it reads as operands;
    - any other (its name says attention, a GEMM, a copy, ...) keeps its name's family, priced from its bytes."""
    named = classify_kernel(kernel)["family"]
    largest = max(tensors.values(), key=lambda t: _numel(t["shape"]))
    if named in INDUCTOR_ROW_FAMILIES and len(largest["shape"]) >= 2:
        return {**inductor_work(kernel, "reduction", tensors, numel, backward), "row": float(largest["shape"][-1])}
    if named in USER_POINTWISE_FAMILIES:
        read = [t for t in tensors.values() if t.get("access", "read") != "write"]
        work = inductor_work(kernel, "pointwise", tensors, numel, backward)
        return {**work, "operands": float(max(len(read), 1))}
    return {}


def inductor_work(kernel: str, kind: str, tensors: dict[str, dict], numel: float, backward: bool) -> dict:
    """Family, op and traffic of an Inductor-generated kernel of `kind` (`INDUCTOR_PREFIXES`) over `numel` elements:
    a pointwise kernel is `elementwise` whatever it fuses (a cast too), a reduction the row family its name
    says (`INDUCTOR_ROW_FAMILIES`) or a `reduction`; each tensor counts at most `numel` of its elements (a kernel visits each
    element of its iteration space once, so it cannot read the rest of a table it gathers from or of a buffer
    it views)."""
    if kind == "pointwise":
        family = "elementwise"
    else:
        named = classify_kernel(kernel)["family"]
        family = named if named in INDUCTOR_ROW_FAMILIES else "reduction"
    traffic, dtype = _traffic(tensors, numel)
    op = inductor_op(kind, backward)
    return {"family": family, "op": op, "work_bytes": traffic, **({"dtype": dtype} if dtype is not None else {})}


FRAME_COLUMNS = ("batch", "m", "n", "k", "numel", "row", "operands", "work_bytes", "flops", "tile_m", "tile_n")


def fill(
    calls: pd.DataFrame,
    kernel_names: np.ndarray,
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    num: dict[str, np.ndarray],
) -> np.ndarray:
    """Fill the work of every call whose `args` hold a Triton launch (in place); returns which rows. `op` holds
    each call's enclosing op on entry: a launch inside a backward op (`CompiledFunctionBackward`) is a backward
    pass's (Inductor names a forward kernel for the backward ops whose values it saves, too)."""
    args = calls["args"]
    rows = contains(args, '"triton"')
    at = np.flatnonzero(rows)
    if not len(at):
        return rows
    # a launch repeats every layer and step: each distinct (kernel, arguments, backward) is described once
    # (by codes: the launches' argument strings stay in Arrow, none becomes a Python string per launch)
    text_codes, texts = pd.factorize(args.iloc[at])
    name_codes, names = pd.factorize(kernel_names[at])  # strings: '' where the kernel is unnamed
    if (name_codes < 0).any():  # a null name: the spec makes kernel names non-null ('' when unnamed)
        row = at[np.flatnonzero(name_codes < 0)[0]]
        seq = calls["seq"].iat[row] if "seq" in calls else row
        raise ValueError(f"the Triton launch of call {seq} has a null kernel name (the trace spec writes '' if none)")
    backward = per_distinct(op[at], lambda name: "backward" in str(name).lower(), False, bool)
    key = (name_codes.astype(np.int64) * len(texts) + text_codes) * 2 + backward
    codes, _ = pd.factorize(key)
    first = np.unique(codes, return_index=True)[1]  # each distinct key's first launch, in code order
    works = [
        describe(names[n], texts[t], bool(back))
        for n, t, back in zip(name_codes[first], text_codes[first], backward[first])
    ]
    for column, out in (("family", family), ("dtype", dtype)):  # kept where the description has none
        has = np.array([column in work for work in works], dtype=bool)[codes]
        out[at[has]] = np.array([work.get(column) for work in works], dtype=object)[codes[has]]
    op[at] = np.array([work["op"] for work in works], dtype=object)[codes]
    for column in FRAME_COLUMNS:
        num[column][at] = np.array([work.get(column, np.nan) for work in works], dtype="float64")[codes]
    return rows
