"""The names every stage of Maya shares, as the trace records them: kernel families, element types and
their sizes, collective names, and the classification of kernels by name.

Pure Python (the standard library only), so GPU hosts and the trace core can use it with nothing else
installed. Every other module takes these names from here instead of keeping a copy.
"""

from __future__ import annotations

import re

KERNEL_FAMILIES: tuple[str, ...] = (
    "gemm",
    "attention",
    "elementwise",
    "reduction",
    "normalization",
    "softmax",
    "embedding",
    "optimizer",
    "copy",
    "other",
)
"""Families of device work the estimators price, one predictor each (`kernels.family` adds `collective`)."""
COLLECTIVE_FAMILY = "collective"
"""`kernels.family` of NCCL's kernels: priced by the collective model, not as kernel work."""
MATRIX_FAMILIES: tuple[str, ...] = ("gemm", "attention")
"""Families whose work is matrix products: shaped by `m`, `n`, `k`, and run on the tensor cores (the
dtype's tensor-core peak applies; the other families run on the fp32 pipes)."""

DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "u8": 1,
    "int32": 4,
    "int64": 8,
    "bool": 1,
}
"""Element size of every dtype name Maya uses (`tf32`: fp32 storage on the TF32 tensor-core path; `u8`: raw bytes)."""

_DTYPE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "fp64": ("fp64", "f64", "float64", "double"),
    "fp32": ("fp32", "f32", "float32", "float"),
    "tf32": ("tf32",),
    "fp16": ("fp16", "f16", "float16", "half"),
    "bf16": ("bf16", "bfloat16"),
    "fp8": (
        "fp8",
        "float8",
        "fp8e4m3",
        "fp8e5m2",
        "float8e4m3",
        "float8e5m2",
        "float8e4m3fn",
        "float8e5m2fn",
        "float8e4m3fnuz",
        "float8e5m2fnuz",
    ),
    "int8": ("int8", "i8", "char", "signedchar"),
    "u8": ("u8", "uint8", "unsignedchar", "byte"),
    "int32": ("int32", "i32", "int", "uint32", "u32"),
    "int64": ("int64", "i64", "long", "longint", "uint64", "u64"),
    "bool": ("bool",),
}
_DTYPES = {spelling: name for name, spellings in _DTYPE_SPELLINGS.items() for spelling in spellings}
_DTYPE_PREFIXES = ("c10::", "torch.", "nccl")


def dtype_name(raw: object) -> str | None:
    """Maya's name (`bf16`, `fp32`, ...) of a dtype as torch, c10, NCCL, Kineto or Maya spell it
    (`c10::BFloat16`, `torch.float16`, `ncclFloat32`, `long int`, `fp8e4m3`); None when unknown."""
    if not isinstance(raw, str):
        return None
    key = raw.strip().lower()
    for prefix in _DTYPE_PREFIXES:
        key = key.removeprefix(prefix)
    return _DTYPES.get(key.replace("_", "").replace("-", "").replace(" ", ""))


def dtype_bytes(raw: object, default: int | None = None) -> int | None:
    """Element size of a dtype in any spelling `dtype_name` understands; `default` when unknown."""
    name = dtype_name(raw)
    return DTYPE_BYTES[name] if name else default


NCCL_API_COLLECTIVES: dict[str, str] = {
    "ncclAllReduce": "allreduce",
    "ncclReduce": "reduce",
    "ncclBroadcast": "broadcast",
    "ncclAllGather": "allgather",
    "ncclReduceScatter": "reducescatter",
    "ncclAlltoAll": "alltoall",
    "ncclGather": "gather",
    "ncclScatter": "scatter",
    "ncclSend": "send",
    "ncclRecv": "recv",
}
"""NCCL API -> `api_calls.collective_name`."""
COLLECTIVES: tuple[str, ...] = (
    "allreduce",
    "reducescatter",
    "allgather",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
)
"""Trace collective names, in the order `collective_name` matches them (longer names first)."""
MODULE_RANGE_PREFIX = "nn.Module: "
"""`ops.name` prefix of the range around a module's forward (`nn.Module: model.layers.3.mlp`, PyTorch profiler's
spelling): the ops under it carry its `module_path`. One in the backward phase is a forward pass run again
(activation recomputation)."""
TE_CALL_PREFIX = "te::"
"""`ops.name` prefix of a call into Transformer Engine's PyTorch extension (`te::layernorm_fwd`, `te::quantize`), with
the shapes and dtypes of its tensor arguments: its own kernels carry no sizes, the call's arguments do."""
EVAL_RANGE = "maya::eval"
"""`ops.name` of the range a capture opens around an evaluation forward pass (a model called in eval mode or
under inference mode): its ops are phase `eval`, and each one is an evaluation the simulator counts."""
_COLLECTIVE_FRAGMENTS = (*((c, c) for c in COLLECTIVES[:5]), ("bcast", "broadcast"), *((c, c) for c in COLLECTIVES[5:]))


def collective_name(raw: object) -> str | None:
    """The trace's collective name of any spelling (`all_reduce`, `ncclAllGather`,
    `_reduce_scatter_base`, `alltoallv`, `c10d::broadcast_`); None when it names no collective."""
    if not isinstance(raw, str):
        return None
    key = raw.lower().removeprefix("nccl").replace("_", "").replace("-", "").replace(" ", "")
    return next((name for fragment, name in _COLLECTIVE_FRAGMENTS if fragment in key), None)


_KERNEL_PATTERNS = (
    (COLLECTIVE_FAMILY, re.compile(r"nccl")),
    ("attention", re.compile(r"flash|fmha|sdpa|attention")),
    ("other", re.compile(r"prepare_grouped_gemm")),  # a grouped GEMM's one-block setup (per-group pointers)
    ("gemm", re.compile(r"gemm|gemv|cutlass|nvjet")),
    ("softmax", re.compile(r"softmax")),
    ("normalization", re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm")),
    ("optimizer", re.compile(r"adam|multi_tensor_apply")),
    ("embedding", re.compile(r"embedding|indexselect|gather_kernel")),  # torch's index_select runs a gather kernel
    ("reduction", re.compile(r"reduce|triton_red|triton_per")),
    ("copy", re.compile(r"copy")),
    ("elementwise", re.compile(r"elementwise|vectorized|triton_poi|(?<!apex_)fused_dropout_kernel")),
)
"""Kernel family by the first pattern found in the lower-cased kernel name."""
_CUBLAS = re.compile(r"sm\d+_xmma|ampere_|volta_|turing_|cutlass|nvjet")


def classify_kernel(name: str) -> dict[str, str]:
    """Kernel family and library (`nccl`, `cublas`, `triton`, `torch`) guessed from a kernel's name."""
    lower = name.lower()
    family = next((f for f, pattern in _KERNEL_PATTERNS if pattern.search(lower)), "other")
    library = (
        "nccl"
        if family == COLLECTIVE_FAMILY
        else "cublas"
        if family == "gemm" and _CUBLAS.search(lower)
        else "triton"
        if lower.startswith("triton")
        else "torch"
    )
    return {"family": family, "library": library}
