"""Torch's allocator history in an emulated rank (`maya emulate --memory-history`): what holds the memory.

PyTorch's own caching allocator runs over the stubs, so its history (`torch.cuda.memory._record_memory_history`)
works under emulation as on a GPU. A rank started with `MAYA_EMU_MEMORY_HISTORY` set records every allocation and
free with its Python frames from CUDA's initialisation on (before the first allocation, once the script could set
the allocator's settings; `torch.cuda._lazy_call`, a private torch API, runs it then), marks each optimizer step
(the allocator's thread-local `user_metadata`: `maya:optimizer_step:<n>`, and each step's start and end in
`time_us`, torch's clock of the events, from torch's global optimizer hooks: a step that allocates nothing still
has its bounds), and keeps the script's own calls of `_record_memory_history` (their time and arguments; the
script's settings win, and the reader then refuses the history).

At the rank's end (complete, failed, stopped by `--iterations`), after the capture is finished and its status
written, it writes torch's snapshot (`_dump_snapshot`'s pickle, which pytorch.org/memory_viz reads) as
`rank<N>.pickle` in that folder, beside `rank<N>.json`: what reading it needs (the recording's entry cap, the
steps, the script's calls, the paths of torch and of the standard library and Maya's runner, whose frames are not
the script's). Both files appear atomically. A rank stopped by a signal writes the sidecar alone, with the reason
(`skipped`): taking the snapshot can outlast the launcher's grace before its SIGKILL. `maya memory` reads them
(`maya.api.memory`).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import sys
import sysconfig
import time
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


def _write_atomically(path: Path, write: Any) -> None:
    """Call `write(file)` on a temporary file, then put it at `path` whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _now_us() -> int:
    """Unix time in microseconds: the clock of the history's `time_us`."""
    return time.time_ns() // 1000


def _jsonable(value: Any) -> Any:
    """An argument of a script's call as JSON keeps it (repr when it is not plain)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


class Recorder:
    """Records torch's allocator history in this rank and writes it at the end (`write`)."""

    def __init__(self, torch: Any, folder: Path, rank: int):
        self.torch, self.folder, self.rank = torch, folder, rank
        self.marks = hasattr(torch.cuda.memory, "_set_memory_metadata")  # thread-local event metadata
        self.steps: list[list[int]] = []  # each outermost optimizer step's [start, end] in time_us (end 0: running)
        self.depth = 0
        self.started = False
        self.script_calls: list[dict] = []  # the script's own calls of `_record_memory_history`
        self.record = torch.cuda.memory._record_memory_history
        self._wrap_scripts_calls()
        lazy_call = getattr(torch.cuda, "_lazy_call", None)
        if lazy_call is None:
            raise RuntimeError(
                f"maya emulate --memory-history: torch {torch.__version__} has no torch.cuda._lazy_call (a private "
                "torch API that starts the recording at CUDA's initialisation)"
            )
        # once CUDA initialises, before its first allocation: starting earlier would read the allocator's settings
        # before the script could set them (`PYTORCH_CUDA_ALLOC_CONF` in `os.environ`, as modded-nanogpt does)
        lazy_call(self._start)

    def _start(self) -> None:
        if any(c["function"] == "_record_memory_history" for c in self.script_calls):
            return  # the script configured the history itself before CUDA's initialisation: its settings win
        self.record("all", context="alloc", stacks="python", max_entries=MAX_ENTRIES)
        self.started = True

    def _wrap_scripts_calls(self) -> None:
        """Keep the script's calls of `_record_memory_history` (time, arguments), then do what it asked."""
        memory = self.torch.cuda.memory
        memory._record_memory_history = self._kept("_record_memory_history", memory._record_memory_history)

    def _kept(self, name: str, original: Any) -> Any:
        """`original`, its calls kept in `script_calls`."""

        @functools.wraps(original)
        def kept(*args: Any, **kwargs: Any) -> Any:
            self.script_calls.append(
                {
                    "function": name,
                    "time_us": _now_us(),
                    "args": [_jsonable(a) for a in args],
                    "kwargs": {k: _jsonable(v) for k, v in kwargs.items()},
                }
            )
            return original(*args, **kwargs)

        return kept

    def optimizer_hooks(self) -> list:
        """Global optimizer hooks marking each outermost step's bounds and events (a wrapper's step calls its inner
        optimizer's: one step)."""
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        mark = self.torch.cuda.memory._set_memory_metadata if self.marks else None

        def stepping(optimizer, args, kwargs) -> None:
            if self.depth == 0 and self.started:
                self.steps.append([_now_us(), 0])
                if mark:
                    mark(f"{OPTIMIZER_STEP}{len(self.steps) - 1}")
            self.depth += 1

        def stepped(optimizer, args, kwargs) -> None:
            self.depth = max(self.depth - 1, 0)
            if self.depth == 0 and self.steps and self.steps[-1][1] == 0:
                self.steps[-1][1] = _now_us()
                if mark:
                    mark("")

        return [register_optimizer_step_pre_hook(stepping), register_optimizer_step_post_hook(stepped)]

    def sidecar(self, skipped: str | None = None) -> dict:
        """What reading the snapshot needs; `skipped`: why there is no snapshot."""
        torch_paths = sorted({str(Path(self.torch.__file__).parent), str(Path(self.torch.__file__).resolve().parent)})
        emulator = Path(__file__).parent
        return {
            "rank": self.rank,
            "max_entries": MAX_ENTRIES,
            "optimizer_marks": self.marks,
            "optimizer_steps": self.steps,
            "script_calls": self.script_calls,
            "skipped": skipped,
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

    def write(self, interrupted_by: str | None = None) -> None:
        """Write the snapshot and its sidecar (atomically: a reader sees both whole or not at all); nothing when
        the script never initialised CUDA. The sidecar alone, with the reason, when a signal stopped the rank
        (`interrupted_by`) or the script configured the history before CUDA's initialisation (not Maya's then)."""
        if not self.started and not self.script_calls:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        skipped = None
        if interrupted_by is not None:
            skipped = (
                f"the rank was stopped by {interrupted_by}: its history was not taken, so that nothing delays the "
                "rank's end past the launcher's grace before SIGKILL"
            )
        elif not self.started:
            skipped = "the script configured the allocator's history itself before CUDA's initialisation"
        if skipped is None:
            snapshot = self.torch.cuda.memory._snapshot()
            _write_atomically(snapshot_path(self.folder, self.rank), lambda f: pickle.dump(snapshot, f))
        sidecar = json.dumps(self.sidecar(skipped)).encode()
        _write_atomically(sidecar_path(self.folder, self.rank), lambda f: f.write(sidecar))


def install(torch: Any) -> Recorder | None:
    """Start recording when the launcher asked for it (`MAYA_EMU_MEMORY_HISTORY`: the folder); None otherwise."""
    folder = settings.EMU_MEMORY_HISTORY.get()
    if folder is None:
        return None
    return Recorder(torch, Path(folder), int(os.environ.get("RANK", "0")))


def written(recorder: Recorder | None, interrupted_by: str | None) -> None:
    """Write `recorder`'s snapshot (the sidecar alone when a signal stopped the rank); a failure is said on
    stderr (the capture is already written)."""
    if recorder is None:
        return
    try:
        recorder.write(interrupted_by)
    except Exception as e:  # noqa: BLE001 - the rank ends with its script's status whatever this raises
        print(f"maya emulator: the memory history of rank {recorder.rank} was not written: {e!r}", file=sys.stderr)
