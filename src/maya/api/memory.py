"""What holds a rank's memory at its peak (`maya memory RUN`), read from torch's allocator history that
`maya emulate --memory-history` keeps (`maya.emulator.memory_history`).

The history's events are replayed in order: an allocation counts its block's bytes (`memory_blocks`: as
`torch.cuda.max_memory_allocated` counts them), a free takes them back (when asked for: its block is reused once
complete), and segments (`cudaMalloc`s, expandable segments' mapped pages) add to what is held. The peak is the
first event after which the most bytes are allocated (one pass finds it, a second collects what is live then);
what is live then is grouped by an inferred category and by its allocating frame, the innermost frame outside
torch, the standard library and Maya's runner (the script's or the framework's line; DDP's own frame for what
`nn/parallel/distributed.py` allocates). Optimizer steps are known from the rank's hooks (their start and end in
the events' clock, and the marks of the events inside them), so a step that allocates nothing still bounds the
others. Categories, inferred, in this order:

- `optimizer state`: allocated inside an optimizer step and still live after its end; what the step frees itself
  is `activations and temporaries`;
- `other`: allocated by DDP (`nn/parallel/distributed.py`: its buckets, rebuilt in a forward);
- `gradients`: allocated in the backward pass (with no Python frame, on autograd's engine thread, or under
  `torch.autograd`'s backward) and still live when the next optimizer step starts (or never freed); what backward
  frees before is `activations and temporaries`; freed with no step after it: `other`;
- `parameters`: allocated while a module is built or moved (`nn.Module.__init__` of torch's modules, `_apply`:
  `.cuda()`, `.to()`, `to_empty`) or sharded (FSDP's `fully_shard` and its classes' `__init__`);
- `activations and temporaries`: allocated under a module's forward (`nn.Module.__call__`) and freed before the
  next optimizer step starts (with no step after it: freed at all); kept longer (a cache, a lazy module's
  parameters), it is `other`;
- `other`: anything else (its frame says where).

A history Maya cannot trust is refused with the reason (`UntrustedHistory`): one the script reconfigured or
cleared (its own `_record_memory_history` calls), one that reached its entry cap (`CappedHistory`), one not taken
(the rank was stopped by a signal), and one that contradicts itself (a free of an address not allocated, an
address allocated twice, fewer bytes held than allocated).
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


class UntrustedHistory(ValueError):
    """The rank's history cannot be trusted (the message says why): it is refused, never summarised."""


class CappedHistory(UntrustedHistory):
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
    disagreement: str | None = None
    """Why the history's peak may differ from the trace's (None: no reason known, or they agree)."""
    replayed_from: int | None = None
    """The captured rank whose history this is, when deduplication replayed `rank` from it (None: its own)."""

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
            "replayed_from": self.replayed_from,
            "device": self.device,
            "peak": {
                "allocated_bytes": self.allocated_bytes,
                "trace_allocated_bytes": self.trace_allocated_bytes,
                "agrees": self.agrees,
                "disagreement": self.disagreement,
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
    """The ranks of `run_dir` that have a memory history (its sidecar, written last), and its snapshot's file
    (absent when the rank's history was not taken: the sidecar says why)."""
    folder = Path(run_dir) / FOLDER
    found = {}
    for path in folder.glob("rank*.json") if folder.is_dir() else ():
        rank = path.stem.removeprefix("rank")
        if rank.isdigit():
            found[int(rank)] = snapshot_path(folder, int(rank))
    return dict(sorted(found.items()))


def peak_memory(run_dir: str | Path, rank: int | None = None) -> PeakMemory:
    """What holds rank `rank`'s memory at its peak (None: the snapshot rank with the largest allocated peak in the
    trace; a rank deduplication replayed: the history of the rank captured for it, which the result names).
    Raises `TraceError` (not a run), `NoMemoryHistory` (no snapshot of that rank) and `UntrustedHistory`."""
    run = Run(Path(run_dir))
    found = snapshots(run_dir)
    if not found:
        raise NoMemoryHistory(
            f"{run_dir}: no memory history (emulate with `maya emulate --memory-history` to record it)"
        )
    attrs = json.loads(run.info.get("attrs") or "{}")
    peaks = _trace_peaks(attrs)
    if rank is None:
        rank = max(found, key=lambda r: (max(peaks.get(r, {}).values(), default=0), -r))
    replayed_from = None
    if rank not in found:
        represents = attrs.get("represents") or {}
        replayed_from = next((int(r) for r, ranks in represents.items() if rank in ranks and int(r) in found), None)
        if replayed_from is None:
            raise NoMemoryHistory(f"{run_dir}: no memory history of rank {rank} (ranks with one: {sorted(found)})")
    read = rank if replayed_from is None else replayed_from
    folder = Path(run_dir) / FOLDER
    sidecar = json.loads(sidecar_path(folder, read).read_text())
    _refuse_untrusted(read, sidecar)
    with open(snapshot_path(folder, read), "rb") as f:
        snapshot = _PlainData(f).load()
    traces = snapshot.get("device_traces") or []
    capped = [d for d, t in enumerate(traces) if len(t) >= sidecar["max_entries"]]
    if capped:
        raise CappedHistory(
            f"rank {read}'s memory history reached its cap of {sidecar['max_entries']:,} events on device "
            f"{capped[0]}: only the last ones are kept, so its peak cannot be told (emulate fewer --iterations)"
        )
    settings = snapshot.get("allocator_settings") or {}
    try:
        replays = [_replay(t, sidecar, settings) for t in traces]
    except UntrustedHistory as e:
        raise UntrustedHistory(f"rank {read}'s memory history contradicts itself: {e}") from None
    device = max(range(len(replays)), key=lambda d: (replays[d].allocated, -d), default=None)
    if device is None or replays[device].event < 0:
        raise NoMemoryHistory(f"{run_dir}: rank {read}'s memory history has no device allocation")
    peak = replays[device]
    trace_peak = peaks.get(read, {}).get(device)
    disagreement = None
    if trace_peak is not None and trace_peak != peak.allocated:
        disagreement = _disagreement(peak.allocated - trace_peak, settings)
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
        disagreement,
        replayed_from,
    )


def _refuse_untrusted(rank: int, sidecar: dict) -> None:
    """Raise `UntrustedHistory` when the rank's history was not taken or the script reconfigured it."""
    if sidecar.get("skipped"):
        raise UntrustedHistory(f"rank {rank} has no memory history: {sidecar['skipped']}")
    calls = [c for c in sidecar.get("script_calls") or [] if c["function"] == "_record_memory_history"]
    if calls:
        shown = ", ".join(
            f"_record_memory_history({', '.join([*map(repr, c['args']), *(f'{k}={v!r}' for k, v in c['kwargs'].items())])})"
            for c in calls[:3]
        )
        raise UntrustedHistory(
            f"rank {rank}'s memory history is not Maya's: the script reconfigured or cleared it ({shown}), so "
            "what it kept cannot be trusted to hold the peak (remove those calls to read it)"
        )


def _disagreement(difference: int, settings: dict) -> str | None:
    """Why the history's peak differs from the trace's by `difference` bytes, when a reason is known."""
    reasons = []
    divisions = settings.get("roundup_power2_divisions") or {}
    if any(int(v) for v in (divisions.values() if isinstance(divisions, dict) else [divisions])):
        reasons.append("the allocator setting roundup_power2_divisions rounds blocks in a way not modelled")
    if not reasons:
        return None
    return f"{difference:+,} bytes: " + "; ".join(reasons)


def _trace_peaks(attrs: dict) -> dict[int, dict[int, int]]:
    """The trace's allocated peaks (attrs `allocator_peaks`) by rank and device."""
    recorded = attrs.get("allocator_peaks") or {}
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
    """The peak of one device's events and what is live at it: one pass finds the peak's event and each
    allocation's block and free, a second the allocations live at that event. Raises `UntrustedHistory` when the
    events contradict each other."""
    allocated = held = 0
    peak = _Peak()
    blocks = Blocks(settings)
    live: dict[int, int] = {}  # address -> index of its allocation
    requested: set[int] = set()  # addresses whose free was asked for and is not complete yet
    size: dict[int, int] = {}  # allocation index -> its block's bytes
    freed: dict[int, int] = {}  # allocation index -> index of the free that took its bytes back
    for i, e in enumerate(trace):
        action, addr = e["action"], e.get("addr")
        if action == "alloc":
            if addr in live:
                raise UntrustedHistory(
                    f"event {i} allocates {addr:#x}, which event {live[addr]} allocated and no free followed"
                )
            live[addr] = i
            size[i] = blocks.allocate(addr, e["size"])
            allocated += size[i]
            if allocated > peak.allocated:
                peak.allocated, peak.held, peak.event = allocated, held, i
        elif action in ("free_requested", "free_completed") and addr in live:
            start = live.pop(addr)  # torch counts a block free when it is asked to (`free_requested`) ...
            freed[start] = i
            allocated -= size[start]
            if action == "free_completed":
                blocks.free(addr)
            else:
                requested.add(addr)
        elif action == "free_completed" and addr in requested:  # ... and reuses it once its streams are done
            requested.discard(addr)
            blocks.free(addr)
        elif action in ("free_requested", "free_completed"):
            raise UntrustedHistory(f"event {i} frees {addr:#x}, which no event allocated")
        elif action in ("segment_alloc", "segment_map"):
            held += e["size"]
            blocks.map(addr, e["size"])
        elif action in ("segment_free", "segment_unmap"):
            held -= e["size"]
            blocks.unmap(addr, e["size"])
        if held < allocated:
            raise UntrustedHistory(f"after event {i}, {held:,} bytes are held and {allocated:,} allocated")
    if peak.event < 0:
        return peak
    at_peak = _live_at(trace, peak.event)
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


def _live_at(trace: list[dict], last: int) -> list[int]:
    """The allocations live after event `last` (their indices)."""
    live: dict[int, int] = {}
    for i, e in enumerate(trace[: last + 1]):
        if e["action"] == "alloc":
            live[e["addr"]] = i
        elif e["action"] in ("free_requested", "free_completed"):
            live.pop(e["addr"], None)
    return list(live.values())


class _Categories:
    """Each allocation's inferred category and allocating frame (the module docstring's rules)."""

    def __init__(self, trace: list[dict], freed: dict[int, int], sidecar: dict):
        self.trace, self.freed = trace, freed
        self.libraries = tuple(p.rstrip("/") + "/" for p in sidecar["library_paths"]) + tuple(
            p for p in sidecar["library_paths"] if p.endswith(".py")
        )
        self.torch = tuple(p.rstrip("/") + "/" for p in sidecar["torch_paths"])
        self.steps = _steps(trace, sidecar)
        self.starts = sorted(start for start, _ in self.steps.values())

    def site(self, i: int) -> tuple[str, int, str]:
        """The allocating frame: (file, line, function)."""
        ddp = self._ddp_frame(i)
        if ddp is not None:
            return ddp["filename"], int(ddp["line"]), ddp["name"]
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

    def _ddp_frame(self, i: int) -> dict | None:
        """The event's innermost frame when it is DDP's own (`nn/parallel/distributed.py`), else None."""
        frames = self.trace[i].get("frames") or []
        if frames and any(frames[0]["filename"] == root + "nn/parallel/distributed.py" for root in self.torch):
            return frames[0]
        return None

    def _time(self, i: int | None) -> int | None:
        return None if i is None else int(self.trace[i].get("time_us") or 0)

    def step(self, i: int) -> int | None:
        """The optimizer step event `i` happened in (None: outside any)."""
        marked = _step(self.trace[i])
        if marked is not None:
            return marked
        t = self._time(i)
        return next((n for n, (start, end) in self.steps.items() if start <= t <= end), None)

    def category(self, i: int) -> str:
        freed = self._time(self.freed.get(i))
        step = self.step(i)
        if step is not None:
            return "optimizer state" if freed is None or freed > self.steps[step][1] else "activations and temporaries"
        if self._ddp_frame(i) is not None:
            return "other"
        following = next((s for s in self.starts if s > self._time(i)), None)
        torch_frames = self._torch_frames(i)
        if not self.trace[i].get("frames") or any(
            path.startswith("autograd/") and name in ("backward", "grad", "_engine_run_backward")
            for path, name in torch_frames
        ):
            if freed is None or (following is not None and freed > following):
                return "gradients"
            return "activations and temporaries" if following is not None else "other"
        if any(
            (path == "nn/modules/module.py" and name in ("_apply", "to_empty"))
            or (path.startswith("nn/modules/") and name in ("__init__", "reset_parameters"))
            or (path.startswith("distributed/fsdp/") and name in ("fully_shard", "__init__"))
            for path, name in torch_frames
        ):
            return "parameters"
        if any(path == "nn/modules/module.py" and name == "_call_impl" for path, name in torch_frames):
            transient = freed is not None and (following is None or freed < following)
            return "activations and temporaries" if transient else "other"
        return "other"


def _steps(trace: list[dict], sidecar: dict) -> dict[int, tuple[int, int]]:
    """Each optimizer step's (start, end) in the events' clock: the rank's hooks' times (a step still running at
    the end ends after every event), else the first and last events it marks (a history without the times)."""
    recorded = sidecar.get("optimizer_steps")
    if recorded is not None:
        return {n: (start, end or 2**63) for n, (start, end) in enumerate(recorded)}
    marked: dict[int, list[int]] = {}
    for e in trace:
        step = _step(e)
        if step is not None:
            t = int(e.get("time_us") or 0)
            marked.setdefault(step, [t, t])[1] = t
    return {n: (start, end) for n, (start, end) in marked.items()}


def _step(event: dict) -> int | None:
    """The optimizer step an event's mark says it happened in (None: none)."""
    mark = event.get("user_metadata") or ""
    return int(mark[len(OPTIMIZER_STEP) :]) if mark.startswith(OPTIMIZER_STEP) else None
