"""Virtual GPUs: run an unmodified training script on emulated CUDA devices and keep its trace (`emulate`).

`emulate`, `EmulationResult` and `Topology` are imported on first use (PEP 562), so that the ranks' own
`python -m maya.emulator.runner` does not import the launcher."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .launcher import EmulationResult, Topology, emulate

__all__ = ["EmulationResult", "Topology", "emulate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import launcher

        return getattr(launcher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
