"""What holds a rank's memory at its peak (`maya memory RUN`), read from torch's allocator history that
`maya emulate --memory-history` keeps (`maya.emulator.memory_history`).

The history's events are replayed in order: an allocation counts its block's bytes (`memory_blocks`: as
`torch.cuda.max_memory_allocated` counts them), a free takes them back (when asked for: its block is reused once complete), and segments (`cudaMalloc`s,
expandable segments' mapped pages) add to what is held. The peak is the first event after which the most bytes are
allocated; what is live then is grouped by an inferred category and by its allocating frame, the innermost frame
outside torch, the standard library and Maya's runner (the script's or the framework's line). Categories, inferred,
in this order:

- `optimizer state`: allocated inside an optimizer step (`torch.optim` hooks mark the events) and still live after
  its last event; what the step frees itself is `activations and temporaries`;
- `gradients`: allocated in the backward pass (with no Python frame, on autograd's engine thread, or under
  `torch.autograd`'s backward) and still live when the next optimizer step starts (or never freed); what backward
  frees before is `activations and temporaries`;
- `parameters`: allocated while a module is built or moved (`nn.Module.__init__` of torch's modules, `_apply`:
  `.cuda()`, `.to()`, `to_empty`) or sharded (FSDP's `fully_shard` and its classes' `__init__`);
- `activations and temporaries`: allocated under a module's forward (`nn.Module.__call__`);
- `other`: anything else (its frame says where).
"""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from maya.emulator.memory_history import FOLDER, OPTIMIZER_STEP, sidecar_path, snapshot_path
from maya_trace_spec import Run

from .memory_blocks import Blocks

NO_FRAME = "(no Python frame: a C++ thread, autograd's backward)"
"""The allocating frame of an event without Python frames."""


class NoMemoryHistory(ValueError):
    """The run has no snapshot of the rank asked for (it was emulated without `--memory-history`)."""


class CappedHistory(ValueError):
    """The rank's history reached its entry cap: the ring buffer kept only the last events, so the peak is unknown."""


@dataclass(frozen=True)
class Holder:
    """Live bytes at the peak of one category and allocating frame (`file`:`line` in `function`)."""

    category: str
    file: str
    line: int
    function: str
    bytes: int
    count: int


@dataclass(frozen=True)
class PeakMemory:
    """What a rank's allocator held at its peak of allocated bytes."""

    run_dir: str
    rank: int
    device: int
    allocated_bytes: int
    """The peak of bytes allocated to tensors, from the history."""
    trace_allocated_bytes: int | None
    """The trace's figure (`torch.cuda.max_memory_allocated` at the rank's end; None when not recorded)."""
    held_bytes: int
    """Bytes of the segments held at that instant."""
    event: int
    """The index of the event that reached the peak."""
    events: int
    reached_by: Holder
    """The allocation that reached the peak (its bytes, count 1)."""
    holders: list[Holder] = field(default_factory=list)
    """By category and frame, largest first."""

    @property
    def overhead_bytes(self) -> int:
        """Held and not allocated at the peak: the caching allocator's free blocks and rounding."""
        return self.held_bytes - self.allocated_bytes

    @property
    def agrees(self) -> bool | None:
        """Whether the history's peak equals the trace's (None: the trace has none)."""
        return None if self.trace_allocated_bytes is None else self.allocated_bytes == self.trace_allocated_bytes

    def categories(self) -> list[tuple[str, int, int]]:
        """(category, bytes, count), largest first."""
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for h in self.holders:
            totals[h.category][0] += h.bytes
            totals[h.category][1] += h.count
        return sorted(((c, b, n) for c, (b, n) in totals.items()), key=lambda t: (-t[1], t[0]))

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        """The JSON `maya memory --json` prints: the peak, the categories and the `top` frames (None: all)."""
        return {
            "run": self.run_dir,
            "rank": self.rank,
            "device": self.device,
            "peak": {
                "allocated_bytes": self.allocated_bytes,
                "trace_allocated_bytes": self.trace_allocated_bytes,
                "agrees": self.agrees,
                "held_bytes": self.held_bytes,
                "overhead_bytes": self.overhead_bytes,
                "event": self.event,
                "events": self.events,
                "reached_by": asdict(self.reached_by),
            },
            "categories": [{"category": c, "bytes": b, "count": n} for c, b, n in self.categories()],
            "frames": [asdict(h) for h in self.holders[:top]],
        }


class _PlainData(pickle.Unpickler):
    """Unpickles plain data only (a snapshot is dicts, lists, tuples, strings and numbers): no code runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a memory snapshot holds plain data, not {module}.{name}")


def snapshots(run_dir: str | Path) -> dict[int, Path]:
    """The ranks of `run_dir` that have a memory snapshot, and its file."""
    folder = Path(run_dir) / FOLDER
    found = {}
    for path in folder.glob("rank*.pickle") if folder.is_dir() else ():
        rank = path.stem.removeprefix("rank")
        if rank.isdigit() and sidecar_path(folder, int(rank)).is_file():
            found[int(rank)] = path
    return dict(sorted(found.items()))


def peak_memory(run_dir: str | Path, rank: int | None = None) -> PeakMemory:
    """What holds rank `rank`'s memory at its peak (None: the snapshot rank with the largest allocated peak in the
    trace). Raises `TraceError` (not a run), `NoMemoryHistory` (no snapshot of that rank) and `CappedHistory`."""
    run = Run(Path(run_dir))
    found = snapshots(run_dir)
    if not found:
        raise NoMemoryHistory(
            f"{run_dir}: no memory history (emulate with `maya emulate --memory-history` to record it)"
        )
    peaks = _trace_peaks(run.info.get("attrs"))
    if rank is None:
        rank = max(found, key=lambda r: (max(peaks.get(r, {}).values(), default=0), -r))
    if rank not in found:
        raise NoMemoryHistory(f"{run_dir}: no memory history of rank {rank} (ranks with one: {sorted(found)})")
    folder = Path(run_dir) / FOLDER
    sidecar = json.loads(sidecar_path(folder, rank).read_text())
    with open(snapshot_path(folder, rank), "rb") as f:
        snapshot = _PlainData(f).load()
    traces = snapshot.get("device_traces") or []
    capped = [d for d, t in enumerate(traces) if len(t) >= sidecar["max_entries"]]
    if capped:
        raise CappedHistory(
            f"rank {rank}'s memory history reached its cap of {sidecar['max_entries']:,} events on device "
            f"{capped[0]}: only the last ones are kept, so its peak cannot be told (emulate fewer --iterations)"
        )
    replays = [_replay(t, sidecar, snapshot.get("allocator_settings") or {}) for t in traces]
    device = max(range(len(replays)), key=lambda d: (replays[d].allocated, -d), default=None)
    if device is None or replays[device].event < 0:
        raise NoMemoryHistory(f"{run_dir}: rank {rank}'s memory history has no device allocation")
    peak = replays[device]
    trace_peak = peaks.get(rank, {}).get(device)
    return PeakMemory(
        str(run_dir),
        rank,
        device,
        peak.allocated,
        trace_peak,
        peak.held,
        peak.event,
        len(traces[device]),
        peak.reached_by,
        peak.holders,
    )


def _trace_peaks(attrs: str | None) -> dict[int, dict[int, int]]:
    """The trace's allocated peaks (attrs `allocator_peaks`) by rank and device."""
    recorded = (json.loads(attrs) if attrs else {}).get("allocator_peaks") or {}
    return {
        int(rank): {int(d): int(v["allocated_bytes"]) for d, v in (devices or {}).items() if "allocated_bytes" in v}
        for rank, devices in recorded.items()
    }


@dataclass
class _Peak:
    allocated: int = 0
    held: int = 0
    event: int = -1
    reached_by: Holder | None = None
    holders: list[Holder] = field(default_factory=list)


def _replay(trace: list[dict], sidecar: dict, settings: dict) -> _Peak:
    """The peak of one device's events and what is live at it."""
    allocated = held = 0
    peak = _Peak()
    blocks = Blocks(settings)
    live: dict[int, int] = {}  # address -> index of its allocation
    size: dict[int, int] = {}  # allocation index -> its block's bytes
    at_peak: list[int] = []
    freed: dict[int, int] = {}  # allocation index -> index of its completed free
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            live[e["addr"]] = i
            size[i] = blocks.allocate(e["addr"], e["size"])
            allocated += size[i]
            if allocated > peak.allocated:
                peak.allocated, peak.held, peak.event = allocated, held, i
                at_peak = list(live.values())
        elif action in ("free_requested", "free_completed") and e["addr"] in live:
            start = live.pop(e["addr"])  # torch counts a block free when it is asked to (`free_requested`) ...
            freed[start] = i
            allocated -= size[start]
            if action == "free_completed":
                blocks.free(e["addr"])
        elif action == "free_completed":  # ... and reuses it once the streams that used it are done with it
            blocks.free(e["addr"])
        elif action in ("segment_alloc", "segment_map"):
            held += e["size"]
            blocks.map(e["addr"], e["size"])
        elif action in ("segment_free", "segment_unmap"):
            held -= e["size"]
            blocks.unmap(e["addr"], e["size"])
    if peak.event < 0:
        return peak
    infer = _Categories(trace, freed, sidecar)
    groups: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for i in at_peak:
        key = (infer.category(i), *infer.site(i))
        groups[key][0] += size[i]
        groups[key][1] += 1
    peak.holders = sorted(
        (Holder(c, f, ln, fn, b, n) for (c, f, ln, fn), (b, n) in groups.items()),
        key=lambda h: (-h.bytes, h.category, h.file, h.line),
    )
    peak.reached_by = Holder(infer.category(peak.event), *infer.site(peak.event), size[peak.event], 1)
    return peak


class _Categories:
    """Each allocation's inferred category and allocating frame (the module docstring's rules)."""

    def __init__(self, trace: list[dict], freed: dict[int, int], sidecar: dict):
        self.trace, self.freed = trace, freed
        self.libraries = tuple(p.rstrip("/") + "/" for p in sidecar["library_paths"]) + tuple(
            p for p in sidecar["library_paths"] if p.endswith(".py")
        )
        self.torch = tuple(p.rstrip("/") + "/" for p in sidecar["torch_paths"])
        self.steps: dict[int, list[int]] = {}  # optimizer step -> [first, last] event index
        for i, e in enumerate(trace):
            step = _step(e)
            if step is not None:
                self.steps.setdefault(step, [i, i])[1] = i
        self.starts = sorted(first for first, _ in self.steps.values())

    def site(self, i: int) -> tuple[str, int, str]:
        """The allocating frame: (file, line, function)."""
        frames = self.trace[i].get("frames") or []
        for f in frames:
            name = f["filename"]
            if not (name.startswith("<") or name.startswith(self.libraries)):
                return name, int(f["line"]), f["name"]
        if frames:  # only library frames: the innermost says where
            return frames[0]["filename"], int(frames[0]["line"]), frames[0]["name"]
        return NO_FRAME, 0, ""

    def _torch_frames(self, i: int) -> list[tuple[str, str]]:
        """(path inside torch, function) of the event's torch frames."""
        found = []
        for f in self.trace[i].get("frames") or []:
            for root in self.torch:
                if f["filename"].startswith(root):
                    found.append((f["filename"][len(root) :], f["name"]))
                    break
        return found

    def category(self, i: int) -> str:
        freed = self.freed.get(i)
        step = _step(self.trace[i])
        if step is not None:
            return "optimizer state" if freed is None or freed > self.steps[step][1] else "activations and temporaries"
        torch_frames = self._torch_frames(i)
        if not self.trace[i].get("frames") or any(
            path.startswith("autograd/") and name in ("backward", "grad", "_engine_run_backward")
            for path, name in torch_frames
        ):
            following = next((s for s in self.starts if s > i), None)
            kept = freed is None or (following is not None and freed > following)
            return "gradients" if kept else "activations and temporaries"
        if any(
            (path == "nn/modules/module.py" and name in ("_apply", "to_empty"))
            or (path.startswith("nn/modules/") and name in ("__init__", "reset_parameters"))
            or (path.startswith("distributed/fsdp/") and name in ("fully_shard", "__init__"))
            for path, name in torch_frames
        ):
            return "parameters"
        if any(path == "nn/modules/module.py" and name == "_call_impl" for path, name in torch_frames):
            return "activations and temporaries"
        return "other"


def _step(event: dict) -> int | None:
    """The optimizer step an event happened in (None: outside any)."""
    mark = event.get("user_metadata") or ""
    return int(mark[len(OPTIMIZER_STEP) :]) if mark.startswith(OPTIMIZER_STEP) else None
