"""`torch.multiprocessing.spawn` in an emulated rank: the worker of the rank's local index runs in the rank.

The DDP tutorial's pattern, `python train.py` calling `mp.spawn(train, args=(world,), nprocs=world)` with one worker
per GPU of the node, starts its ranks itself. A spawned interpreter inherits the preloaded stubs but records nothing
(its calls are only counted), so under `maya emulate --nproc-per-node N` each emulated rank is one of those workers:
`spawn` and `start_processes` with `nprocs == N` call `fn(LOCAL_RANK, *args)` in the rank and return as a joined
spawn does. Another worker count, a job of more than one node (the workers' own numbering is the node's), or
`join=False` (a context whose processes the script watches), fails, naming the call and what to give instead. So
does any spawn in a rank a launcher's command started (`maya emulate -- torchrun ...`, `$MAYA_EMU_LAUNCH`): the
launcher started the job's ranks, so the workers are not ranks, and they would run unrecorded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from maya.core import settings


class SpawnNotEmulated(RuntimeError):
    """A `torch.multiprocessing` spawn the emulator cannot stand for with the rank itself."""


def start_processes(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> None:
    """`torch.multiprocessing.start_processes`, emulated: this rank is the worker of its local index."""
    launch = settings.EMU_LAUNCH.get()
    if launch:
        raise SpawnNotEmulated(
            f"torch.multiprocessing {start_method} of {nprocs} worker(s) in a rank `{launch}` started: the launcher "
            "starts the job's ranks, and workers spawned from one would run unrecorded, outside the job (not "
            "emulated); a script that spawns its ranks itself runs as `maya emulate --nproc-per-node N -- python "
            "SCRIPT`"
        )
    local, per_node = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    world = int(os.environ.get("WORLD_SIZE", per_node))
    if world != per_node:
        raise SpawnNotEmulated(
            f"torch.multiprocessing spawns workers on one node, in a job of {world // per_node} nodes: the "
            "workers' own numbering (rank = their index) would give every node's ranks 0.."
            f"{per_node - 1}; give maya emulate one node (--nnodes 1 --nproc-per-node {per_node})"
        )
    if nprocs != per_node:
        raise SpawnNotEmulated(
            f"torch.multiprocessing spawns {nprocs} worker(s) in a job of {per_node} GPU(s) per node: each emulated "
            f"rank runs one spawned worker, the one of its local rank; give maya emulate --nproc-per-node {nprocs} "
            "(and --nnodes) when the workers are the job's ranks"
        )
    if not join:
        raise SpawnNotEmulated(
            f"torch.multiprocessing {start_method} with join=False: the workers run in the emulated ranks, and a "
            "ProcessContext of running processes is not emulated (join=True is)"
        )
    fn(local, *args)


spawn = start_processes
"""`torch.multiprocessing.spawn`, emulated: `start_processes` with its defaults (the 'spawn' start method)."""


def install() -> None:
    """Replace torch.multiprocessing's `spawn` and `start_processes` (the package's names and its `spawn` module's)
    before the script imports them."""
    import torch.multiprocessing as mp

    module = sys.modules["torch.multiprocessing.spawn"]
    for owner in (mp, module):
        owner.spawn = spawn
        owner.start_processes = start_processes
