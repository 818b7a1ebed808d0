"""What the stand-ins for CUDA extensions (`standins/`) share: a call named by a trace range, opaque to
torch.compile as a compiled extension's call is, and the extension's device test."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

Fn = TypeVar("Fn", bound=Callable[..., Any])


def traced_call(prefix: str, *, opaque: bool = True) -> Callable[[Fn], Fn]:
    """Decorator: each call runs in a trace range `<prefix><function name>` (the prediction's notes count them) and,
    with `opaque`, is a graph break for torch.compile (`torch._disable_dynamo` imports Dynamo only when a call needs
    it)."""

    def decorate(fn: Fn) -> Fn:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            with torch.profiler.record_function(prefix + fn.__name__):
                return fn(*args, **kwargs)

        return torch._disable_dynamo(call) if opaque else call  # type: ignore[return-value]

    return decorate


def on_device(t: torch.Tensor) -> bool:
    """Whether a tensor is not on the host (an extension's `is_cuda`; a meta tensor passes, for checks of shapes)."""
    return t.device.type != "cpu"
