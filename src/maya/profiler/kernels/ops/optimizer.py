"""AdamW steps (fused and foreach implementations) over the parameter lists of GPT models."""

from __future__ import annotations

import torch

from ..configs import KernelConfig
from ..shapes import gpt_layer_param_shapes
from .inputs import Call, Inputs


def _adamw(fused: bool):
    def build(c: KernelConfig, x: Inputs) -> Call:
        p = c.shape
        shapes = gpt_layer_param_shapes(p["hidden"], str(p["ffn"]), p["tp"]) * p["layers"]
        per_set = list(zip(*(x.normal(*s) for s in shapes)))  # one parameter list per input set
        optimizers = []
        for tensors in per_set:
            params = [torch.nn.Parameter(t) for t in tensors]
            for param in params:
                param.grad = x.normal_like(param)
            optimizers.append(torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=fused, foreach=not fused))
        return lambda i: optimizers[i].step()

    return build


BUILDERS = {"adamw_fused": _adamw(True), "adamw_foreach": _adamw(False)}
