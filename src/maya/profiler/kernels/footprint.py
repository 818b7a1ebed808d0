"""How much device memory a config needs, estimated from its shape before anything is allocated.

A config's tensors split into the inputs, which are rotated (several copies cycled so that the L2
cache does not flatter the timing), and the rest (outputs, workspaces), allocated once. Estimates
err on the large side. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from maya_trace_spec.vocabulary import DTYPE_BYTES

from .configs import KernelConfig

GEMM_WORKSPACE = 64 << 20
"""cuBLAS/cuBLASLt workspace and split-K scratch, bytes."""
ATTENTION_WORKSPACE = 128 << 20
MAX_BUFFERS = 32
L2_MULTIPLE = 2
"""Rotated inputs should span this many times the L2 cache."""


@dataclass(frozen=True)
class Footprint:
    rotated_bytes: int
    """Bytes of one set of inputs (and of what each set keeps alive, e.g. a retained autograd graph)."""
    fixed_bytes: int
    """Bytes allocated once: outputs, workspaces."""

    def total(self, n_buffers: int) -> int:
        return n_buffers * self.rotated_bytes + self.fixed_bytes


def buffer_count(rotated_bytes: int, l2_bytes: int) -> int:
    """Input copies to cycle so that together they span `L2_MULTIPLE`× the L2 cache (at least one, at
    most `MAX_BUFFERS`; two when the cache size is unknown)."""
    if l2_bytes <= 0:
        return 2
    return max(1, min(MAX_BUFFERS, math.ceil(L2_MULTIPLE * l2_bytes / max(1, rotated_bytes))))


def fits(needed_bytes: int, free_bytes: int, fraction: float = 0.7) -> bool:
    """The memory guard: a config may use at most `fraction` of the memory free before it starts."""
    return needed_bytes <= fraction * free_bytes


def footprint(config: KernelConfig) -> Footprint:
    p, e = config.shape, config.element_bytes
    family = config.family
    if family == "gemm":
        batch = p.get("batch", 1)
        inputs = batch * (p["m"] * p["k"] + p["k"] * p["n"]) * e + p["n"] * e
        return Footprint(inputs, batch * p["m"] * p["n"] * e + GEMM_WORKSPACE)
    if family == "attention":
        q = p["batch"] * p["seq"] * p["heads"] * p["head_dim"] * e
        kv = 2 * q * p["kv_heads"] // p["heads"]
        lse = p["batch"] * p["heads"] * p["seq"] * 4
        if config.op == "sdpa_fwd":
            return Footprint(q + kv, q + lse + ATTENTION_WORKSPACE)
        # backward: inputs, output, its gradient and the saved statistics per set; fp32 dq accumulator
        return Footprint(3 * q + kv + lse, q + kv + 4 * q // e + ATTENTION_WORKSPACE)
    if family == "optimizer":
        n_params = p["n_params"]
        step_tensors = 4 * p["n_tensors"] * 64
        return Footprint(4 * n_params * e + step_tensors, 0)
    if family == "embedding":
        table = p["vocab"] * p["hidden"] * e
        act = p["tokens"] * p["hidden"] * e
        if config.op == "embedding_fwd":
            return Footprint(table + p["tokens"] * 8, act)
        # backward: the gradient of the output per set; the dense weight gradient and sort scratch once
        return Footprint(table + act + p["tokens"] * 8, table + 4 * p["tokens"] * 8)
    if family == "cross_entropy":
        logits = p["tokens"] * p["vocab"] * e
        log_probs = p["tokens"] * p["vocab"] * max(e, 4)
        if config.op == "cross_entropy_fwd":
            return Footprint(logits + p["tokens"] * 8, log_probs)
        return Footprint(logits + log_probs + p["tokens"] * 8, logits)
    if family == "copy":
        numel = p["tokens"] * p["hidden"]
        out = DTYPE_BYTES[str(p.get("dst_dtype", config.dtype))]
        return Footprint(numel * e, numel * out)
    if family in ("memcpy", "memset"):
        device_copies = 2 if config.op == "memcpy_d2d" else 1
        return Footprint(device_copies * p["bytes"], 0)
    return _rowwise(config)


def _rowwise(config: KernelConfig) -> Footprint:
    """Norms, softmax, activations, dropout: [rows, cols] in, the same out; backward also keeps the
    forward output (or mask) and the incoming gradient per set."""
    p, e = config.shape, config.element_bytes
    numel = p["rows"] * p["cols"] if "rows" in p else p["tokens"] * p["hidden"]
    binary = config.op in ("add", "mul")
    if config.op.endswith("_bwd"):
        return Footprint(3 * numel * e, numel * e + 2 * numel)  # + fp32 statistics / bool masks
    return Footprint((2 if binary else 1) * numel * e, numel * e + 2 * numel)
