"""Out-of-memory failures a trace records (`memory_events` of kind `oom`): which rank, where (the op, its module,
phase and iteration), how much it asked for against what was in use and the device's capacity, and what can
honestly be said about what would fit: a GPU with at least the memory in use plus the request gets past
that allocation; whether the rest of the step fits there only an emulation on it can tell."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from maya.core import hardware as catalog

from .trace import RankTrace, TraceSet

GiB = 2**30


class RecordedOutOfMemory(ValueError):
    """The run stopped on an out-of-memory failure before every rank it needs was captured: there is no
    step to replay, and the failure is the answer."""


@dataclass(frozen=True)
class OutOfMemory:
    rank: int
    requested: int
    in_use: int
    """Device bytes allocated when the allocation failed."""
    capacity: int | None
    hardware: str | None
    op: str | None
    module: str | None
    phase: str | None
    iteration: int | None

    @property
    def needed(self) -> int:
        return self.in_use + self.requested

    def where(self) -> str:
        parts = [f"in {self.op}" if self.op else "outside any recorded op"]
        if self.module:
            parts.append(f"module {self.module}")
        if self.phase:
            parts.append(self.phase)
        if self.iteration is not None:
            parts.append(f"iteration {self.iteration}")
        return ", ".join(parts)

    def describe(self) -> str:
        """One sentence: the rank, where, how much against the capacity."""
        against = (
            f" of the {self.hardware}'s {self.capacity / GiB:.2f} GiB"
            if self.capacity and self.hardware
            else f" of {self.capacity / GiB:.2f} GiB"
            if self.capacity
            else ""
        )
        return (
            f"rank {self.rank} ran out of device memory {self.where()}: it requested {self.requested / GiB:.2f} "
            f"GiB with {self.in_use / GiB:.2f} GiB in use, {self.needed / GiB:.2f} GiB in all{against}"
        )

    def would_fit(self) -> str:
        """What gets past this allocation, as far as the trace can tell."""
        bigger = sorted(
            (hw.memory_bytes, hw.name) for hw in map(catalog.get, catalog.names()) if hw.memory_bytes >= self.needed
        )
        gpus = (
            f"catalog GPUs with that much: {', '.join(f'{n} ({b / GiB:.0f} GiB)' for b, n in bigger)}"
            if bigger
            else "no GPU in the hardware catalog has that much"
        )
        return (
            f"getting past this allocation needs at least {self.needed / GiB:.2f} GiB per GPU ({gpus}); "
            "whether the rest of the step then fits is not in the trace: emulate again on such a GPU "
            "(--hardware) or with less memory per GPU (a smaller batch, activation checkpointing, more "
            "parallelism)"
        )


def recorded_ooms(traces: TraceSet) -> list[OutOfMemory]:
    """The last out-of-memory failure of every captured rank that has one, by rank (the one that stopped it: an
    earlier one the caching allocator may have survived by freeing its cache and retrying)."""
    out = []
    for rank, trace in sorted(traces.ranks.items()):
        memory = trace.memory
        if not len(memory) or not (memory["kind"] == "oom").any():
            continue
        event = memory[memory["kind"] == "oom"].sort_values("seq").iloc[-1]
        out.append(_describe(rank, trace, event, traces.hardware))
    return out


def _describe(rank: int, trace: RankTrace, event: pd.Series, run_hardware: str | None) -> OutOfMemory:
    before = trace.memory[trace.memory["seq"] <= event["seq"]]
    in_use = before["allocated_bytes"].dropna()
    capacity, name = trace.device.get("memory_bytes"), trace.device.get("hardware") or run_hardware
    if (capacity is None or pd.isna(capacity)) and name:
        try:
            capacity = catalog.get(name).memory_bytes
        except catalog.UnknownHardware:
            capacity = None
    op = _op(trace, event.get("op_id"))
    return OutOfMemory(
        rank=rank,
        requested=int(event["bytes"]),
        in_use=int(in_use.iloc[-1]) if len(in_use) else 0,
        capacity=None if capacity is None or pd.isna(capacity) else int(capacity),
        hardware=name,
        op=op.get("name"),
        module=op.get("module_path"),
        phase=op.get("phase"),
        iteration=op.get("iteration"),
    )


def _op(trace: RankTrace, op_id) -> dict:
    """The op that made the allocation, with the module of the nearest enclosing op that names one."""
    ops = trace.ops
    if op_id is None or pd.isna(op_id) or not len(ops):
        return {}
    by_id = ops.set_index("op_id")
    if op_id not in by_id.index:
        return {}
    row = by_id.loc[op_id]
    found = {
        k: (None if pd.isna(row[k]) else row[k])
        for k in ("name", "module_path", "phase", "iteration")
        if k in row.index
    }
    if found.get("iteration") is not None:
        found["iteration"] = int(found["iteration"])
    parent, seen = row.get("parent_op_id"), {op_id}
    while (
        found.get("module_path") is None
        and parent is not None
        and not pd.isna(parent)
        and parent in by_id.index
        and parent not in seen
    ):
        seen.add(parent)
        up = by_id.loc[parent]
        found["module_path"] = None if pd.isna(up.get("module_path")) else up.get("module_path")
        parent = up.get("parent_op_id")
    return found


def missing_ranks(traces: TraceSet) -> list[int]:
    """Ranks of the job neither captured nor represented by a captured rank."""
    covered = {r for trace in traces.ranks.values() for r in trace.represents}
    return [r for r in range(int(traces.info["world_size"])) if r not in covered]


def check_stopped_by_oom(traces: TraceSet) -> None:
    """Raise `RecordedOutOfMemory` when a rank ran out of memory and the emulation stopped before every rank
    was captured (deduplication captures rank 0 first; its failure ends the run)."""
    ooms = recorded_ooms(traces)
    absent = missing_ranks(traces)
    if not ooms or not absent:
        return
    first = ooms[0]
    shown = ", ".join(map(str, absent[:8])) + (", ..." if len(absent) > 8 else "")
    raise RecordedOutOfMemory(
        f"{first.describe()}. The emulation stopped there, before rank(s) {shown} were captured, so the job cannot "
        f"be replayed. {first.would_fit()[0].upper()}{first.would_fit()[1:]}."
    )
