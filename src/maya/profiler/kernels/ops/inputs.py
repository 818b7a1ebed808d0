"""Random input tensors for one config, in rotated copies, and the two call shapes every op takes:
a forward call and the backward (gradient) call of the same forward."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "u8": torch.uint8}

Call = Callable[[int], object]
"""Runs the op once on input set `i` (0 <= i < the number of sets)."""
Args = Sequence[tuple]
"""One tuple of op arguments per input set."""


class Unsupported(Exception):
    """The op cannot run in this configuration here (e.g. host-device copies on a CPU device)."""


class Inputs:
    """Makes `copies` independent random copies of each input on `device` (normal data, never zeros:
    zeros can run faster than real data), deterministically from `seed`."""

    def __init__(self, device: torch.device, dtype: str, copies: int, seed: int = 0):
        self.device = device
        self.dtype = TORCH_DTYPES[dtype]
        self.copies = copies
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape: int, dtype: str | None = None, grad: bool = False) -> list[torch.Tensor]:
        dt = TORCH_DTYPES[dtype] if dtype else self.dtype
        return [
            torch.randn(shape, dtype=dt, device=self.device, generator=self.generator, requires_grad=grad)
            for _ in range(self.copies)
        ]

    def normal_like(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.randn(tensor.shape, dtype=tensor.dtype, device=tensor.device, generator=self.generator)

    def integers(self, high: int, *shape: int) -> list[torch.Tensor]:
        return [torch.randint(0, high, shape, device=self.device, generator=self.generator) for _ in range(self.copies)]

    def raw_bytes(self, count: int) -> list[torch.Tensor]:
        """Random bytes (the bit patterns of normal fp32 values); `count` must be a multiple of 4."""
        return [t.view(torch.uint8) for t in self.normal(count // 4, dtype="fp32")]


def forward_call(forward: Callable[..., torch.Tensor], args: Args) -> Call:
    return lambda i: forward(*args[i])


def backward_call(forward: Callable[..., torch.Tensor], args: Args, inputs: Inputs) -> Call:
    """The gradient of `forward` with respect to its arguments that require grad, for a random output
    gradient. The forward runs once per input set here; each call re-runs only the backward."""
    outputs = [forward(*a) for a in args]
    wrt = [tuple(t for t in a if isinstance(t, torch.Tensor) and t.requires_grad) for a in args]
    grads = [inputs.normal_like(out) for out in outputs]
    return lambda i: torch.autograd.grad(outputs[i], wrt[i], grads[i], retain_graph=True)
