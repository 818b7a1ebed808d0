"""The work of Transformer Engine's own kernels, priced as the eager kernels of the same work.

TE's kernels (NVRTC-compiled or in `libtransformer_engine.so`) carry names, not sizes; the emulator records each call
into TE's PyTorch extension as an op `te::<function>` with its tensor arguments' shapes (`emulator/te_calls.py`),
so a kernel launched inside one is sized by that call's largest tensor (`numel`, its last dimension `row`, its
dtype: `work._op_shapes`). By the kernel's name (first match of `KINDS`), it is then priced as the eager kernel of
the same work (a stand-in: TE's kernels have no measurements of their own):
- LayerNorm / RMSNorm forward and backward (TE's own kernels, or its cuDNN normalization graphs, which the emulator
  records as one kernel `cudnn_layer_norm_fwd` and the like): torch's layer-norm kernels (`native_layer_norm`,
  `native_layer_norm_backward`; RMSNorm as torch's fused RMSNorm, `_fused_rms_norm`);
- the backward's finalize kernel (the weight gradients from the per-block partial sums): a column sum of the fp32
  partials, one row per block of the backward kernel launched before it in the call (its grid);
- casts to fp8 (`cast_transpose*`, TE's vectorised `unary_kernel<identity>`): torch's cast moving the input once
  and each fp8 output (a cast-transpose writes two) once; fp8 transposes likewise, one byte in and out;
- activations and their gradients (the call `te::gelu`, `te::dswiglu`, `te::dbias_dgelu`, ...): torch's activation
  kernels (a gated one, SwiGLU and the like, as vLLM's `silu_and_mul` sized by its output, two operands, as the
  model's rows are; its gradient as the activation's backward moving the gradient, the input and its gradient);
- amax kernels (current scaling's amax, delayed scaling's history update): torch's `amax` over the call's largest
  tensor;
- the bias gradient's `reduce_dbias`: torch's column sum of the gradient (`grad.sum(0)`, the eager bias gradient),
  an upper bound: TE sums per-tile partials its cast kernel wrote;
- softmax (`scaled_*softmax*`): torch's softmax kernels over rows of the last dimension;
- fused RoPE (`fused_rope_forward_kernel`, `fused_rope_backward_kernel` and their THD kernels,
  `fused_rope_thd_*`): vLLM's `rotary_embedding` (Vidur's `attn_rope`), the rotated tensor read and written once
  (numel its elements, row its head dimension). The fused-QKV kernels (`fused_qkv_rope_*`) are left unsized: their
  call's tensor is the packed q/k/v (its last dimension all heads' widths, V's copied too), not one head's rows;
- one-thread or scalar kernels (fused attention's setup `extract_seed_and_offset`, current scaling's
  `compute_scale_from_amax_kernel`, its amax reset `zero_amax_kernel`, the grouped amax reset
  `grouped_amax_zero_kernel`): one element of unknown work
  (a launch), matched before the amax kernels.
TE's GEMMs (cuBLASLt, their own shapes) and fused attention (cuDNN) are not its kernels here. A TE kernel outside a
`te::` call (a trace captured before the calls were recorded) or of no known kind keeps its family from its name and
whatever size its enclosing op gives (`notes` says how many).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from maya_trace_spec.vocabulary import DTYPE_BYTES, TE_CALL_PREFIX

from .distinct import per_distinct

KINDS: tuple[tuple[str, re.Pattern], ...] = (
    ("scalar", re.compile(r"extract_seed_and_offset|compute_scale_from_amax|amax_zero|zero_amax")),
    ("norm_finalize", re.compile(r"bwd_finalize")),
    ("norm_backward", re.compile(r"(?:ln|rmsnorm|rms|layer_norm|rms_norm)_bwd")),
    ("norm_forward", re.compile(r"(?:ln|rmsnorm|rms|layer_norm|rms_norm)_fwd")),
    ("dbias", re.compile(r"reduce_dbias")),
    ("amax", re.compile(r"amax")),
    ("softmax", re.compile(r"softmax")),
    ("rope", re.compile(r"fused_rope_(?:forward|backward|thd)")),
    ("cast", re.compile(r"cast|identity|quantize")),
    ("transpose", re.compile(r"transpose")),
)
"""TE kernel kinds by the first pattern found in the lower-cased kernel name; a kernel of none of them inside an
activation call (`ACTIVATIONS`) is the activation."""
ACTIVATIONS = re.compile(
    r"^(?:dbias_)?(d?)(gelu|qgelu|geglu|qgeglu|relu|reglu|srelu|sreglu|silu|swiglu|clamped_swiglu)$"
)
"""Extension calls that run an activation (`d`: its gradient) over their largest tensor."""
GATED = re.compile(r"glu$")
NOT_TE_WORK = ("gemm", "attention", "collective", "optimizer", "copy")
"""Families a kernel launched inside a `te::` call keeps: its GEMMs, fused attention, fused optimizer, copies."""
MULTI_TENSOR = re.compile(r"multi_tensor")
"""TE's multi-tensor kernels (its fused Adam, gradient norm and scale): an optimizer's, sized as torch's foreach
kernels are (not at all: their tensor lists carry no sizes), so not counted among the unsized TE kernels."""
TE_KERNEL = re.compile(r"transformer_engine|(?:cast_)?transpose(?:_fusion)?_kernel_optimized|transpose_optimized")
"""Kernel names that are TE's whatever encloses them (its NVRTC kernels have plain names)."""
STAND_INS = {
    "norm_forward": "LayerNorm/RMSNorm as torch's layer norm",
    "norm_backward": "their backward as torch's",
    "norm_finalize": "their weight-gradient finalize as a column sum",
    "cast": "fp8 casts as torch's cast",
    "transpose": "fp8 transposes as a one-byte cast",
    "activation": "activations as torch's",
    "amax": "amax kernels as torch's amax",
    "dbias": "bias gradients as torch's column sum",
    "softmax": "softmax as torch's",
    "rope": "fused RoPE as vLLM's rotary embedding",
    "scalar": "one-thread setup and scale kernels as a launch",
}
"""How each kind is priced, in the prediction's note."""


def kind_of(kernel: str, call: str) -> str | None:
    """The kind of a TE kernel (`KINDS`, or `activation`) launched inside the extension call `call` (without
    its `te::` prefix); None: none known."""
    lower = kernel.lower()
    found = next((kind for kind, pattern in KINDS if pattern.search(lower)), None)
    if ACTIVATIONS.match(call) and found in (None, "cast", "transpose"):
        return "activation"  # its fused cast (fp8 out) and transpose are the activation's kernel
    return found


def _activation_op(call: str) -> tuple[str, float, float]:
    """The eager activation kernel an extension call's activation is priced as, its tensor inputs, and the share of
    the call's largest tensor its `numel` (and row) is. A gated forward (`swiglu`: [T, 2F] in, [T, F] out) is
    vLLM's `silu_and_mul` in the model's convention (`estimators.vidur_data`): numel the output's T x F, two
    operands (its halves), so 3TF elements moved. A gated backward reads the gradient [T, F] and the input
    [T, 2F] and writes the input's gradient [T, 2F]: numel 2TF with one and a half operands, 5TF moved."""
    backward, name = ACTIVATIONS.match(call).groups()
    base = "silu" if "silu" in name or "swiglu" in name else "relu" if "relu" in name else "gelu"
    gated = bool(GATED.search(name))
    if backward:
        return (f"{base}_bwd" if base != "relu" else "relu"), 1.5 if gated else 2.0, 1.0
    return ("silu_and_mul", 2.0, 0.5) if gated else (base, 1.0, 1.0)


def fill(
    calls: pd.DataFrame,
    kernel_names: np.ndarray,
    launched: np.ndarray,
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    num: dict[str, np.ndarray],
) -> np.ndarray:
    """Price every TE kernel launched inside a `te::` call (`op` holds the enclosing op's name) as its kind's eager
    kernel (in place); returns which rows. `num` holds the call's sizes from the enclosing op (`numel`, `row`)."""
    inside = launched & per_distinct(op, lambda name: name.startswith(TE_CALL_PREFIX), False, bool)
    # a multi-tensor kernel (TE's fused Adam, its multi-tensor scale) covers chunks of its call's tensor lists, which
    # carry no sizes: not the call's scalar flag's size; `multi_tensor.fill` sizes it by its grid
    num["numel"][inside & (family == "optimizer")] = np.nan
    num["row"][inside & (family == "optimizer")] = np.nan
    inside &= ~np.isin(family, NOT_TE_WORK)
    done = np.zeros(len(calls), dtype=bool)
    if not inside.any():
        return done
    last_norm_grid = {}  # per enclosing op: the grid of its norm backward kernel, for its finalize
    dims = [c for c in ("grid_x", "grid_y", "grid_z") if c in calls]
    grids = calls[dims].to_numpy(dtype="float64", na_value=1.0).prod(axis=1) if dims else np.full(len(calls), np.nan)
    op_ids = calls["op_id"].to_numpy()
    for i in np.flatnonzero(inside):
        call = op[i][len(TE_CALL_PREFIX) :]
        kind = kind_of(kernel_names[i], call)
        if kind is None:
            continue
        numel, row = num["numel"][i], num["row"][i]
        itemsize = DTYPE_BYTES.get(dtype[i], 2)
        if kind == "scalar":
            family[i], num["numel"][i], num["row"][i] = "other", 1.0, 1.0
        elif kind in ("norm_forward", "norm_backward"):
            rms = "rms" in call
            family[i] = "normalization"
            op[i] = ("_fused_rms_norm" if rms else "native_layer_norm") + (
                "_backward" if kind == "norm_backward" else ""
            )
            if kind == "norm_backward":
                last_norm_grid[op_ids[i]] = grids[i]
        elif kind == "norm_finalize":
            parts = last_norm_grid.get(op_ids[i], np.nan)
            gradients = 1.0 if "rms" in call else 2.0  # the scale's, and the shift's for LayerNorm
            family[i], op[i], dtype[i] = "reduction", "sum", "fp32"
            num["numel"][i], num["row"][i] = gradients * row * parts, parts
        elif kind == "dbias":
            family[i], op[i] = "reduction", "sum"
            num["row"][i] = numel / row  # a column sum: each output reduces over the rows
        elif kind == "amax":
            family[i], op[i] = "reduction", "amax"
            num["row"][i] = numel
        elif kind == "softmax":
            family[i], op[i] = "softmax", "softmax_bwd" if "backward" in call else "softmax_fwd"
        elif kind == "rope":
            family[i], op[i] = "elementwise", "rotary_embedding"
        elif kind == "activation":
            family[i] = "elementwise"
            op[i], num["operands"][i], share = _activation_op(call)
            num["numel"][i], num["row"][i] = numel * share, row * share
        else:  # cast, transpose
            family[i], op[i] = "elementwise", "cast"
            if kind == "transpose":
                dtype[i], itemsize = "fp8", 1
            outputs = 2.0 if kind == "cast" and "transpose" in kernel_names[i].lower() else 1.0
            num["work_bytes"][i] = numel * (itemsize + outputs)
        done[i] = True
    return done


def touched(kernels: pd.DataFrame, ops: pd.DataFrame) -> bool:
    """Whether a rank ran a `te::` call or a kernel named as TE's (else `notes` has nothing to count); vectorised,
    as a rank's ops run to millions of rows."""
    if not len(kernels):
        return False
    if len(ops) and ops["name"].astype(str).str.startswith(TE_CALL_PREFIX).fillna(False).to_numpy(dtype=bool).any():
        return True
    return any(TE_KERNEL.search(str(name).lower()) for name in kernels["name"].tolist())


def notes(kernel_names: dict[int, str], calls: pd.DataFrame, ops: pd.DataFrame) -> dict[str, int]:
    """Per stand-in (`STAND_INS`'s words, or `unsized`), how many TE kernel launches of one rank it prices:
    kernels inside a `te::` call by their kind, TE's kernels outside one (or of no known kind) as `unsized`. Nothing
    to count (an empty answer, at once) when no op is a `te::` call and no kernel name is TE's; otherwise the names
    are matched once per distinct (kernel, enclosing op name)."""
    launched = calls["kernel_id"].notna()
    if not launched.any() or not kernel_names:
        return {}
    op_names = dict(zip(ops["op_id"], ops["name"].astype(str))) if len(ops) else {}
    te_ops = [op_id for op_id, name in op_names.items() if name.startswith(TE_CALL_PREFIX)]
    te_kernels = [k for k, name in kernel_names.items() if TE_KERNEL.search(str(name).lower())]
    if not te_ops and not te_kernels:
        return {}
    rows = calls.loc[launched, ["kernel_id", "op_id"]]
    rows = rows[rows["kernel_id"].isin(te_kernels) | rows["op_id"].isin(te_ops)]
    pairs = pd.DataFrame(
        {
            "name": rows["kernel_id"].map(kernel_names).fillna("").astype(str),
            "call": rows["op_id"].map(op_names).fillna("").astype(str),
        }
    ).value_counts(sort=False)
    counts: dict[str, int] = {}
    for (name, call), launches in pairs.items():
        te_call = call.startswith(TE_CALL_PREFIX)
        if (not te_call and not TE_KERNEL.search(name.lower())) or MULTI_TENSOR.search(name):
            continue  # not TE's; or its fused optimizer's, unsized as torch's foreach kernels are
        kind = kind_of(name, call[len(TE_CALL_PREFIX) :]) if te_call else None
        if kind is None and not TE_KERNEL.search(name.lower()):
            continue  # a GEMM or fused attention inside a TE call, priced by its own shape
        key = STAND_INS[kind] if kind else "unsized"
        counts[key] = counts.get(key, 0) + int(launches)
    return counts
