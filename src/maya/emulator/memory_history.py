"""Torch's allocator history in an emulated rank (`maya emulate --memory-history`): what holds the memory.

PyTorch's own caching allocator runs over the stubs, so its history (`torch.cuda.memory._record_memory_history`)
works under emulation as on a GPU. A rank started with `MAYA_EMU_MEMORY_HISTORY` set records every allocation and
free with its Python frames from CUDA's initialisation on (before the first allocation, once the script could set
the allocator's settings), marks each optimizer step (the allocator's thread-local
`user_metadata`: `maya:optimizer_step:<n>`, from torch's global optimizer hooks), and at its end (complete, failed,
stopped by `--iterations` or a signal) writes torch's snapshot (`_dump_snapshot`'s pickle, which
pytorch.org/memory_viz reads) as `rank<N>.pickle` in that folder, beside `rank<N>.json`: what reading it needs
(the recording's entry cap, the paths of torch and of the standard library and Maya's runner, whose frames are
not the script's). Both files appear atomically. `maya memory` reads them (`maya.api.memory`).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import sysconfig
from pathlib import Path
from typing import Any

from maya.core import settings

FOLDER = "memory_history"
"""The run directory's folder of snapshots."""
MAX_ENTRIES = 1_000_000
"""Allocator events kept per device (torch's ring buffer keeps the last ones beyond: the reader then refuses the
peak). Each costs the rank ~2.1 KB at the end (measured: 1.3 KB recorded, 0.8 KB in the snapshot's Python objects)."""
OPTIMIZER_STEP = "maya:optimizer_step:"
"""The `user_metadata` prefix of the allocator events inside an optimizer step (followed by the step's index)."""


def snapshot_path(folder: Path, rank: int) -> Path:
    """Rank `rank`'s snapshot in `folder`."""
    return folder / f"rank{rank}.pickle"


def sidecar_path(folder: Path, rank: int) -> Path:
    """What reading rank `rank`'s snapshot needs (JSON)."""
    return folder / f"rank{rank}.json"


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Recorder:
    """Records torch's allocator history in this rank and writes it at the end (`write`)."""

    def __init__(self, torch: Any, folder: Path, rank: int):
        self.torch, self.folder, self.rank = torch, folder, rank
        self.marks = hasattr(torch.cuda.memory, "_set_memory_metadata")  # thread-local event metadata
        self.steps, self.depth = 0, 0
        self.started = False
        # once CUDA initialises, before its first allocation: starting earlier would read the allocator's settings
        # before the script could set them (`PYTORCH_CUDA_ALLOC_CONF` in `os.environ`, as modded-nanogpt does)
        torch.cuda._lazy_call(self._start)

    def _start(self) -> None:
        self.torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python", max_entries=MAX_ENTRIES)
        self.started = True

    def optimizer_hooks(self) -> list:
        """Global optimizer hooks marking the events of each outermost step (a wrapper's step calls its inner
        optimizer's: one step)."""
        if not self.marks:
            return []
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        mark = self.torch.cuda.memory._set_memory_metadata

        def stepping(optimizer, args, kwargs) -> None:
            if self.depth == 0 and self.started:
                mark(f"{OPTIMIZER_STEP}{self.steps}")
            self.depth += 1

        def stepped(optimizer, args, kwargs) -> None:
            self.depth = max(self.depth - 1, 0)
            if self.depth == 0:
                self.steps += 1
                if self.started:
                    mark("")

        return [register_optimizer_step_pre_hook(stepping), register_optimizer_step_post_hook(stepped)]

    def write(self) -> None:
        """Write the snapshot and its sidecar (atomically: a reader sees both whole or not at all); nothing when the
        script never initialised CUDA."""
        if not self.started:
            return
        snapshot = self.torch.cuda.memory._snapshot()
        self.folder.mkdir(parents=True, exist_ok=True)
        torch_paths = sorted({str(Path(self.torch.__file__).parent), str(Path(self.torch.__file__).resolve().parent)})
        emulator = Path(__file__).parent
        sidecar = {
            "rank": self.rank,
            "max_entries": MAX_ENTRIES,
            "optimizer_marks": self.marks,
            "torch": self.torch.__version__,
            "torch_paths": torch_paths,
            "library_paths": sorted(
                {
                    *torch_paths,
                    sysconfig.get_paths()["stdlib"],
                    str(emulator),
                    str(emulator.parent / "core" / "script_runner.py"),
                }
            ),
        }
        _write_atomically(snapshot_path(self.folder, self.rank), pickle.dumps(snapshot))
        _write_atomically(sidecar_path(self.folder, self.rank), json.dumps(sidecar).encode())


def install(torch: Any) -> Recorder | None:
    """Start recording when the launcher asked for it (`MAYA_EMU_MEMORY_HISTORY`: the folder); None otherwise."""
    folder = settings.EMU_MEMORY_HISTORY.get()
    if folder is None:
        return None
    return Recorder(torch, Path(folder), int(os.environ.get("RANK", "0")))


def written(recorder: Recorder | None) -> None:
    """Write `recorder`'s snapshot; a failure is said on stderr (the capture itself is kept)."""
    if recorder is None:
        return
    try:
        recorder.write()
    except Exception as e:  # noqa: BLE001 - the capture must be written whatever this raises
        print(f"maya emulator: the memory history of rank {recorder.rank} was not written: {e!r}", file=sys.stderr)
