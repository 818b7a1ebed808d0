"""Ops over activations [tokens, hidden] (or [rows, cols]): norms, softmax, activations, residual
add/mul, dropout, cross-entropy and embedding, each forward and backward."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..configs import KernelConfig
from .inputs import Call, Inputs, backward_call, forward_call

EPS = 1e-5
DROPOUT_P = 0.1

ArgsMaker = Callable[[KernelConfig, Inputs, bool], list[tuple]]
ForwardMaker = Callable[[KernelConfig], Callable[..., torch.Tensor]]


def _activation(c: KernelConfig, x: Inputs, grad: bool) -> list[tuple]:
    p = c.shape
    rows, cols = (p["rows"], p["cols"]) if "rows" in p else (p["tokens"], p["hidden"])
    return [(t,) for t in x.normal(rows, cols, grad=grad)]


def _normalized(c: KernelConfig, x: Inputs, grad: bool, *, bias: bool) -> list[tuple]:
    t, h = c.shape["tokens"], c.shape["hidden"]
    params = [x.normal(h, grad=grad) for _ in range(2 if bias else 1)]
    return list(zip(x.normal(t, h, grad=grad), *params))


def _logits(c: KernelConfig, x: Inputs, grad: bool) -> list[tuple]:
    t, v = c.shape["tokens"], c.shape["vocab"]
    return list(zip(x.normal(t, v, grad=grad), x.integers(v, t)))


def _lookup(c: KernelConfig, x: Inputs, grad: bool) -> list[tuple]:
    t, v, h = c.shape["tokens"], c.shape["vocab"], c.shape["hidden"]
    return list(zip(x.integers(v, t), x.normal(v, h, grad=grad)))


OPS: dict[str, tuple[ArgsMaker, ForwardMaker]] = {
    "layer_norm": (
        lambda c, x, g: _normalized(c, x, g, bias=True),
        lambda c: lambda t, w, b: F.layer_norm(t, (c.shape["hidden"],), w, b, EPS),
    ),
    "rms_norm": (
        lambda c, x, g: _normalized(c, x, g, bias=False),
        lambda c: lambda t, w: F.rms_norm(t, (c.shape["hidden"],), w, EPS),
    ),
    "softmax": (_activation, lambda c: lambda t: torch.softmax(t, -1)),
    "gelu": (_activation, lambda c: lambda t: F.gelu(t, approximate=str(c.shape["approximate"]))),
    "silu": (_activation, lambda c: F.silu),
    "dropout": (_activation, lambda c: lambda t: F.dropout(t, DROPOUT_P, training=True)),
    "cross_entropy": (_logits, lambda c: F.cross_entropy),
    "embedding": (_lookup, lambda c: F.embedding),
}
"""Per op: its arguments (per input set; the bool asks for grad-requiring tensors) and its forward."""


def _forward_builder(args: ArgsMaker, forward: ForwardMaker):
    return lambda c, x: forward_call(forward(c), args(c, x, False))


def _backward_builder(args: ArgsMaker, forward: ForwardMaker):
    return lambda c, x: backward_call(forward(c), args(c, x, True), x)


def _binary(op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    def build(c: KernelConfig, x: Inputs) -> Call:
        t, h = c.shape["tokens"], c.shape["hidden"]
        return forward_call(op, list(zip(x.normal(t, h), x.normal(t, h))))

    return build


BUILDERS = {
    **{f"{name}_fwd": _forward_builder(*pair) for name, pair in OPS.items()},
    **{f"{name}_bwd": _backward_builder(*pair) for name, pair in OPS.items()},
    "add": _binary(torch.add),
    "mul": _binary(torch.mul),
}
