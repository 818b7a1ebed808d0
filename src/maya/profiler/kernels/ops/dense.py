"""Matrix products (GEMM) and scaled-dot-product attention, as training calls them.

GEMM shapes: output [m, n], reduction k. A linear layer x[m, k]·W[n, k]ᵀ; its backward products
dX = dY·W and dW = dYᵀ·X, each with the operand layouts autograd uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..configs import KernelConfig
from .inputs import Call, Inputs, backward_call, forward_call


def mm(c: KernelConfig, x: Inputs) -> Call:
    p = c.shape
    return forward_call(torch.mm, list(zip(x.normal(p["m"], p["k"]), x.normal(p["k"], p["n"]))))


def linear(c: KernelConfig, x: Inputs) -> Call:
    p = c.shape
    return forward_call(F.linear, list(zip(x.normal(p["m"], p["k"]), x.normal(p["n"], p["k"]))))


def addmm(c: KernelConfig, x: Inputs) -> Call:
    """A linear layer with bias (GPT-2 style): aten::addmm."""
    p = c.shape
    return forward_call(F.linear, list(zip(x.normal(p["m"], p["k"]), x.normal(p["n"], p["k"]), x.normal(p["n"]))))


def linear_grad_input(c: KernelConfig, x: Inputs) -> Call:
    """dX[m, n] = dY[m, k]·W[k, n] (k: output features, n: input features)."""
    p = c.shape
    return forward_call(torch.mm, list(zip(x.normal(p["m"], p["k"]), x.normal(p["k"], p["n"]))))


def linear_grad_weight(c: KernelConfig, x: Inputs) -> Call:
    """dW[m, n] = dY[k, m]ᵀ·X[k, n] (k: tokens)."""
    p = c.shape
    return forward_call(
        lambda dy, inp: torch.mm(dy.t(), inp), list(zip(x.normal(p["k"], p["m"]), x.normal(p["k"], p["n"])))
    )


def bmm(c: KernelConfig, x: Inputs) -> Call:
    p = c.shape
    return forward_call(
        torch.bmm, list(zip(x.normal(p["batch"], p["m"], p["k"]), x.normal(p["batch"], p["k"], p["n"])))
    )


def _attention_args(c: KernelConfig, x: Inputs, grad: bool) -> list[tuple]:
    """q, k, v as models make them: [batch, seq, heads, head_dim] projections viewed as [b, h, s, d]."""
    p = c.shape
    q = x.normal(p["batch"], p["seq"], p["heads"], p["head_dim"], grad=grad)
    k, v = (x.normal(p["batch"], p["seq"], p["kv_heads"], p["head_dim"], grad=grad) for _ in range(2))
    return [tuple(t.transpose(1, 2) for t in qkv) for qkv in zip(q, k, v)]


def _attention(c: KernelConfig):
    causal, gqa = bool(c.shape["causal"]), c.shape["kv_heads"] < c.shape["heads"]
    extra = {"enable_gqa": True} if gqa else {}
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)


def sdpa_fwd(c: KernelConfig, x: Inputs) -> Call:
    return forward_call(_attention(c), _attention_args(c, x, grad=False))


def sdpa_bwd(c: KernelConfig, x: Inputs) -> Call:
    return backward_call(_attention(c), _attention_args(c, x, grad=True), x)


BUILDERS = {f.__name__: f for f in (mm, linear, addmm, linear_grad_input, linear_grad_weight, bmm, sdpa_fwd, sdpa_bwd)}
