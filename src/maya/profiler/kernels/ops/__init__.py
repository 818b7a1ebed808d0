"""Every op's builder, and the settings an op runs under (TF32, SDPA backend)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..configs import KernelConfig
from . import dense, memory, optimizer, rowwise
from .inputs import Call, Inputs

Builder = Callable[[KernelConfig, Inputs], Call]

BUILDERS: dict[str, Builder] = {**dense.BUILDERS, **rowwise.BUILDERS, **memory.BUILDERS, **optimizer.BUILDERS}

SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def build(config: KernelConfig, inputs: Inputs) -> Call:
    """Allocate the config's inputs and return its call (run under `op_settings(config)`)."""
    return BUILDERS[config.op](config, inputs)


@contextmanager
def op_settings(config: KernelConfig) -> Iterator[None]:
    """TF32 on or off for fp32 matrix products, and the SDPA backend for attention."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if config.tf32 else "highest")
    try:
        with ExitStack() as stack:
            if config.family == "attention":
                stack.enter_context(sdpa_kernel(SDPA_BACKENDS[str(config.shape["backend"])]))
            yield
    finally:
        torch.set_float32_matmul_precision(previous)
