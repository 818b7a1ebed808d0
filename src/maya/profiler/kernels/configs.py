"""What one measurement is: a kernel configuration (family, op, dtype, shape parameters).

Pure Python (no torch), so sweeps can be planned and tested anywhere.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from maya_trace_spec.vocabulary import DTYPE_BYTES

ParamValue = int | str

FAMILY_OPS: dict[str, tuple[str, ...]] = {
    "gemm": ("mm", "linear", "addmm", "linear_grad_input", "linear_grad_weight", "bmm"),
    "attention": ("sdpa_fwd", "sdpa_bwd"),
    "normalization": ("layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd"),
    "softmax": ("softmax_fwd", "softmax_bwd"),
    "elementwise": ("gelu_fwd", "gelu_bwd", "silu_fwd", "silu_bwd", "add", "mul"),
    "dropout": ("dropout_fwd", "dropout_bwd"),
    "cross_entropy": ("cross_entropy_fwd", "cross_entropy_bwd"),
    "embedding": ("embedding_fwd", "embedding_bwd"),
    "optimizer": ("adamw_fused", "adamw_foreach"),
    "copy": ("copy_cast", "copy_transpose"),
    "memcpy": ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d"),
    "memset": ("cuda_memset", "fill_zero"),
}
"""Every sweep family and the ops measured in it (an op belongs to exactly one family)."""

FAMILIES: tuple[str, ...] = tuple(FAMILY_OPS)

KERNEL_FAMILY: dict[str, str] = {
    "gemm": "gemm",
    "attention": "attention",
    "normalization": "normalization",
    "softmax": "softmax",
    "elementwise": "elementwise",
    "dropout": "elementwise",
    "cross_entropy": "reduction",
    "embedding": "embedding",
    "optimizer": "optimizer",
    "copy": "copy",
    "memcpy": "copy",
    "memset": "copy",
}
"""The kernel family (`maya_trace_spec.vocabulary.KERNEL_FAMILIES`) of each sweep family's kernels."""
OP_FAMILY: dict[str, str] = {op: family for family, ops in FAMILY_OPS.items() for op in ops}
"""The sweep family of every op."""

CONFIG_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp32", "u8")
"""Every dtype a config may name (`u8`: raw bytes for copies and memsets)."""

PARAM_TYPES: dict[str, type] = {
    # matrix products: output [m, n], reduction k, `batch` matrices (bmm)
    "m": int,
    "n": int,
    "k": int,
    "batch": int,
    # attention: q [batch, seq, heads, head_dim]; k and v with kv_heads; causal 0/1; SDPA backend
    "seq": int,
    "heads": int,
    "kv_heads": int,
    "head_dim": int,
    "causal": int,
    "backend": str,
    # row-wise ops over [tokens, hidden] (norms, activations, losses, embeddings) or [rows, cols]
    "tokens": int,
    "hidden": int,
    "rows": int,
    "cols": int,
    "vocab": int,
    # optimizer parameter lists: GPT layers of `hidden` with an `ffn` kind, split over `tp` ranks
    "layers": int,
    "ffn": str,
    "tp": int,
    "n_tensors": int,
    "n_params": int,
    # copies and memsets
    "bytes": int,
    "pinned": int,
    "dst_dtype": str,
    # variants
    "approximate": str,
}
"""Every shape parameter a config may carry, with its type: the columns of the measurements table."""

CONFIG_MARK = "maya.config:"
REPEAT_MARK = "maya.repeat:"
"""Profiler annotations around a config's profiled calls (`maya.config:<key>`) and each call."""


def parse_families(text: str) -> tuple[str, ...]:
    """`gemm,attention` -> ("gemm", "attention"); raises ValueError naming unknown families."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAMILY_OPS]
    if unknown or not names:
        raise ValueError(
            f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {','.join(unknown) or repr(text)}; "
            f"known: {','.join(FAMILY_OPS)}"
        )
    return names


def family_of(op: str) -> str:
    try:
        return OP_FAMILY[op]
    except KeyError:
        raise KeyError(f"unknown op {op!r}") from None


@dataclass(frozen=True)
class KernelConfig:
    """One op at one shape and dtype. `tf32` allows TF32 for fp32 matrix products."""

    op: str
    dtype: str
    params: tuple[tuple[str, ParamValue], ...]
    tf32: bool = False

    @classmethod
    def make(cls, op: str, dtype: str, *, tf32: bool = False, **params: ParamValue) -> KernelConfig:
        """A config with its parameters checked against `PARAM_TYPES` and stored sorted."""
        family_of(op)
        if dtype not in CONFIG_DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}")
        for name, value in params.items():
            expected = PARAM_TYPES.get(name)
            if expected is None:
                raise ValueError(f"unknown parameter {name!r}")
            if type(value) is not expected:
                raise TypeError(f"parameter {name!r} must be {expected.__name__}, got {value!r}")
        return cls(op, dtype, tuple(sorted(params.items())), tf32)

    @property
    def family(self) -> str:
        return family_of(self.op)

    @cached_property
    def shape(self) -> dict[str, ParamValue]:
        """The parameters as a dict."""
        return dict(self.params)

    def to_json(self) -> str:
        """Canonical JSON: equal configs give equal text."""
        return json.dumps(
            {"family": self.family, "op": self.op, "dtype": self.dtype, "tf32": self.tf32, "params": self.shape},
            sort_keys=True,
            separators=(",", ":"),
        )

    @cached_property
    def key(self) -> str:
        """Stable id of the config (16 hex digits of the SHA-256 of its canonical JSON)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def label(self) -> str:
        """Short human-readable description, e.g. `gemm/linear bf16 k=4096 m=8192 n=12288`."""
        tf32 = "+tf32" if self.tf32 else ""
        return f"{self.family}/{self.op} {self.dtype}{tf32} " + " ".join(f"{k}={v}" for k, v in self.params)
