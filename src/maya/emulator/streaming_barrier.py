"""MosaicML Streaming's shared-memory barrier: an emulated rank with local peers fails at it, naming what it
waits for and the way out, instead of waiting forever.

`StreamingDataset` (llm-foundry's `text` loader) synchronises the dataloader workers of every local rank of
a node through `SharedBarrier(workers_per_node)`: a counter in shared memory that each worker increments and
then polls until all `LOCAL_WORLD_SIZE x num_workers` have (its local leader also publishes the shard
assignment there for the others to attach). Emulated ranks run in isolation, one after another under
deduplication, so the other local ranks' workers never arrive and the real barrier spins forever, on rank 0
as on any other. No answer from a stand-in would be the library's: the rank raises instead, when the barrier
is first entered.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType

MODULE = "streaming.base.shared.barrier"


class StreamingBarrierWithoutPeers(RuntimeError):
    """A Streaming shared-memory barrier entered by an emulated rank whose local peers do not run with it."""


def refuse(num_procs: int, local_world_size: int) -> None:
    """Raise the error that names the barrier, the processes it waits for and the way out."""
    raise StreamingBarrierWithoutPeers(
        f"maya emulator: MosaicML Streaming's shared-memory barrier waits for {num_procs} dataloader worker "
        f"processes, those of all {local_world_size} local ranks; an emulated rank runs without its peers, so "
        "they never arrive. Emulate with a dataset that each rank reads on its own (llm-foundry: the "
        "`finetuning` loader on local JSON-lines files; see docs/frameworks-and-versions.md)"
    )


def guard(module: ModuleType) -> None:
    """Make `module.SharedBarrier` refuse (in place of waiting) when this rank has local peers."""
    barrier = module.SharedBarrier
    wait = barrier.__call__
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

    def call(self, num_procs: int) -> None:
        if local_world_size > 1:
            refuse(num_procs, local_world_size)
        wait(self, num_procs)

    barrier.__call__ = call


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` once the module `name` has been executed on import."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module: ModuleType) -> None:
            exec_module(module)
            self.then(module)

        spec.loader.exec_module = exec_then
        return spec


def install() -> None:
    """Guard Streaming's barrier in this rank, now if imported already, else when it is imported."""
    if MODULE in sys.modules:
        guard(sys.modules[MODULE])
    else:
        sys.meta_path.insert(0, _AfterImport(MODULE, guard))
