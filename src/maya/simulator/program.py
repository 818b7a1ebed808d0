"""Compile one captured rank's calls into a `Program`: flat per-call lists the engine walks (opcode,
stream index, argument) plus the collective launches. Durations are added later (`Program.price`).

Event versions are resolved here: the k-th `cudaEventRecord` of the rank gets record id k; a wait or
synchronise on an event refers to the record id of that event's latest record before it (-1: never
recorded, which CUDA treats as complete). Collectives between `ncclGroupStart` and the outermost
`ncclGroupEnd` form one launch, issued by the `ncclGroupEnd` call on the first member's stream (a
group spanning several streams is replayed on that one).

Operations are matched across ranks (`topology.py`) by their `CommOp.order`: a collective by its place among its
communicator's collectives (its `comm_seq`, less the sends and receives before it where the communicator's
`comm_seq` counts them: Maya's NCCL stub numbers every call on a communicator, and a send or a receive is made by
some members only); a send or a receive by its place among the transfers between the same two members. The sends
and receives of a scatter or a gather (`core/pipeline_stages.ROOTED`: NCCL's process group runs them so, and
DTensor's `distribute_tensor` scatters from rank 0) are one collective of their communicator per group, numbered
apart: a rank replayed from the root's program (deduplication leaves them out of its layout) meets the root there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from maya.core.pipeline_stages import ROOTED

from .opcodes import COLL, DEVICE_SYNC, EVENT_SYNC, GROUP_END, GROUP_START, NOP, RECORD, WAIT, WORK, WORK_SYNC, classify
from .trace import RankTrace, RebuiltTrace


class CommOp(NamedTuple):
    """One collective or point-to-point operation inside a launch."""

    call: int
    comm: int
    """Index into `Program.communicators`."""
    p2p: bool
    order: int
    """Collectives: `comm_seq` less the sends and receives before it on the communicator where its `comm_seq` counts
    them (`_counts_p2p`; else the count of earlier collectives on the communicator); a scatter's or gather's sends
    (`ROOTED`): -1 less the count of earlier ones on the communicator; p2p: the count of earlier transfers to (send)
    or from (recv) the same peer on the communicator."""
    peer: int = -1
    """p2p: the peer's rank within the communicator."""
    send: bool = False


@dataclass(frozen=True)
class Communicator:
    comm_id: str
    ranks: tuple[int, ...] | None
    """Global ranks of the members by communicator rank (None when the trace does not list them)."""
    size: int


@dataclass
class Program:
    rank: int
    opcodes: np.ndarray
    stream: np.ndarray
    """Stream index per call (into `stream_ids`)."""
    arg: np.ndarray
    """RECORD: record id; WAIT / EVENT_SYNC: record id waited for; COLL: launch index; else 0."""
    stream_ids: list[int]
    n_records: int
    launches: list[list[CommOp]]
    launch_call: list[int]
    """The call that issues each launch (the collective itself, or the group's `ncclGroupEnd`)."""
    communicators: list[Communicator]
    frame: pd.DataFrame | None = None
    """The priced frame (api_calls + opcode + work columns), kept for reports and the timeline."""
    device: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    host: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ready: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Launch delay per call: its device work is ready this long after the call returns (may be negative)."""

    @property
    def n(self) -> int:
        return len(self.opcodes)

    def stream_successors(self) -> np.ndarray:
        """For each call that is an item of its stream (device work, event record or wait, collective
        launch), the next such call on the same stream (`n` after the last)."""
        items = np.flatnonzero(np.isin(self.opcodes, (WORK, WORK_SYNC, RECORD, WAIT, COLL)))
        order = items[np.argsort(self.stream[items], kind="stable")]
        successor = np.full(self.n, self.n, dtype=np.int64)
        same = self.stream[order[1:]] == self.stream[order[:-1]]
        successor[order[:-1][same]] = order[1:][same]
        return successor

    @property
    def launch_ops(self) -> np.ndarray:
        """The call of every collective operation, launch by launch."""
        return np.array([op.call for launch in self.launches for op in launch], dtype=np.int64)

    def price(self, device_ns: np.ndarray, host_ns: np.ndarray, ready_ns: np.ndarray | None = None) -> None:
        """Set device and host time and launch delay per call (nanoseconds, rounded; negative or NaN times
        become 0, NaN or absent delays 0)."""
        self.device = np.rint(np.nan_to_num(np.maximum(device_ns, 0.0))).astype(np.int64)
        self.host = np.rint(np.nan_to_num(np.maximum(host_ns, 0.0))).astype(np.int64)
        self.ready = (
            np.rint(np.nan_to_num(ready_ns)).astype(np.int64) if ready_ns is not None else np.zeros(self.n, np.int64)
        )


class RebuiltProgram(Program):
    """The program of a rebuilt pipeline stage (`trace.RebuiltTrace`): its priced frame is not held but built again
    on each read by `derive` (set when it is priced; None before), the frame read last kept (`_RECENT_FRAME`), so a
    job of 60 rebuilt stages holds one such frame at a time."""

    derive: Callable[[], pd.DataFrame] | None = None

    @property
    def frame(self) -> pd.DataFrame | None:  # type: ignore[override]
        if self.derive is None:
            return None
        if _RECENT_FRAME.get("program") is not self:
            _RECENT_FRAME.clear()  # the previous frame goes before this one is built
            _RECENT_FRAME.update(program=self, frame=self.derive())
        return _RECENT_FRAME["frame"]

    @frame.setter
    def frame(self, value: None) -> None:
        if value is not None:
            raise TypeError("a rebuilt stage's priced frame is built on each read: set `derive`")


_RECENT_FRAME: dict = {}
"""The priced frame of the rebuilt program read last (`RebuiltProgram`)."""


def forget_rebuilt_frame() -> None:
    """Let the priced frame of the rebuilt program read last go (built again if read again)."""
    _RECENT_FRAME.clear()


def _communicators(trace: RankTrace) -> tuple[list[Communicator], dict[str, int]]:
    comms, index = [], {}
    for row in trace.communicators.itertuples(index=False):
        if row.comm_id in index:
            continue
        ranks = tuple(int(r) for r in row.ranks) if row.ranks is not None and len(row.ranks) else None
        index[row.comm_id] = len(comms)
        comms.append(Communicator(str(row.comm_id), ranks, int(row.comm_size)))
    return comms, index


def compile_rank(trace: RankTrace) -> Program:
    calls = trace.calls
    ops = classify(calls)
    stream_codes, stream_ids = pd.factorize(calls["stream_id"].fillna(0).astype(np.int64), sort=True)
    arg = np.zeros(len(calls), dtype=np.int64)
    n_records = _resolve_events(calls, ops, arg)
    comms, comm_index = _communicators(trace)
    launches, launch_call = _launches(trace, calls, ops, arg, comms, comm_index)
    stream = stream_codes.astype(np.int64)
    for call, launch in zip(launch_call, launches):
        stream[call] = stream[launch[0].call]
    return (RebuiltProgram if isinstance(trace, RebuiltTrace) else Program)(
        rank=trace.rank,
        opcodes=ops,
        stream=stream,
        arg=arg,
        stream_ids=[int(s) for s in stream_ids],
        n_records=n_records,
        launches=launches,
        launch_call=launch_call,
        communicators=comms,
    )


def _resolve_events(calls: pd.DataFrame, ops: np.ndarray, arg: np.ndarray) -> int:
    """Record ids for RECORD and the record waited for by WAIT / EVENT_SYNC (in place): records are numbered in
    call order, a wait takes the latest record of its event id before it (-1: none). Calls without an event id: a
    record or wait becomes a NOP, an event synchronise a device synchronise."""
    event_ids = calls["event_id"].to_numpy(dtype="float64", na_value=np.nan)
    rows = np.flatnonzero(np.isin(ops, (RECORD, WAIT, EVENT_SYNC)))
    unnamed = rows[np.isnan(event_ids[rows])]
    ops[unnamed] = np.where(ops[unnamed] == EVENT_SYNC, DEVICE_SYNC, NOP)
    rows = rows[~np.isnan(event_ids[rows])]
    record = ops[rows] == RECORD
    order = np.lexsort((rows, event_ids[rows]))  # by event id, then call order
    at = np.arange(len(order))
    latest = np.maximum.accumulate(np.where(record[order], at, -1))  # each event's last record so far, ...
    same = event_ids[rows][order]
    begins = np.maximum.accumulate(np.where(np.r_[True, same[1:] != same[:-1]], at, 0))
    latest = np.where(latest >= begins, latest, -1)  # ... of this event id alone
    numbers = (np.cumsum(record) - 1)[order]
    arg[rows[order]] = np.where(latest >= 0, numbers[np.maximum(latest, 0)], -1)
    return int(record.sum())


def _rooted(trace: RankTrace) -> np.ndarray:
    """Per call, whether its op is a collective with a root that NCCL runs as sends and receives (`ROOTED`)."""
    ops = trace.ops
    if not len(ops) or "name" not in ops or not ops["name"].isin(ROOTED).any():
        return np.zeros(len(trace.calls), dtype=bool)
    first, where = trace.call_ops()
    named = ops["name"].isin(ROOTED).to_numpy(dtype=bool)[first]
    return np.where(where >= 0, named[np.maximum(where, 0)], False)


def _counts_p2p(comm_ids: np.ndarray, seqs: np.ndarray, p2p: np.ndarray, coll: np.ndarray) -> set:
    """The communicators whose `comm_seq` numbers their sends and receives along with their collectives, so that a
    collective's `comm_seq` is not the same on every member after p2p calls (Maya's NCCL stub: one count per
    communicator; a root's scatter moves it N - 1, each receiver's 1): those holding a send or receive whose calls'
    `comm_seq` strictly increase in call order. A numbering of its own for p2p (torch's process group, as the
    profiler records it) repeats numbers: its collectives' `comm_seq` are kept."""
    rows = coll[~np.isnan(seqs[coll])]
    frame = pd.DataFrame({"comm": comm_ids[rows], "seq": seqs[rows], "p2p": p2p[rows]})
    found = set()
    for comm, group in frame.groupby("comm", sort=False):
        if group["p2p"].any() and (group["seq"].diff().iloc[1:] > 0).all():
            found.add(comm)
    return found


def _launches(
    trace: RankTrace,
    calls: pd.DataFrame,
    ops: np.ndarray,
    arg: np.ndarray,
    comms: list[Communicator],
    comm_index: dict[str, int],
) -> tuple[list[list[CommOp]], list[int]]:
    """Collective launches (in place: grouped collectives become NOPs, the group's end the launch)."""
    launches: list[list[CommOp]] = []
    launch_call: list[int] = []
    counters: dict[tuple, int] = {}
    pending: list[CommOp] = []
    depth = 0
    rows = np.flatnonzero(np.isin(ops, (COLL, GROUP_START, GROUP_END)))
    rooted = _rooted(trace)
    rooted_in_group: set[int] = set()
    comm_ids = calls["comm_id"].to_numpy(dtype=object)
    names = calls["collective_name"].to_numpy(dtype=object)
    seqs = calls["comm_seq"].to_numpy(dtype="float64", na_value=np.nan)
    peers = calls["peer_rank"].to_numpy(dtype="float64", na_value=np.nan)
    coll = rows[ops[rows] == COLL]
    is_p2p = np.zeros(len(names), dtype=bool)
    is_p2p[coll] = [("send" in n or "recv" in n) for n in (str(x).lower() for x in names[coll])]
    counts_p2p = _counts_p2p(comm_ids, seqs, is_p2p, coll)
    p2p_seen: dict[int, int] = {}  # per communicator, its sends and receives so far (rooted or not)
    for i in rows:
        if ops[i] == GROUP_START:
            depth += 1
            ops[i] = NOP
            continue
        if ops[i] == GROUP_END:
            depth = max(depth - 1, 0)
            ops[i] = NOP
            if depth == 0 and pending:
                ops[i], arg[i] = COLL, len(launches)
                launches.append(pending)
                launch_call.append(int(i))
                pending = []
                rooted_in_group.clear()
            continue
        cid = comm_ids[i]
        if cid not in comm_index:
            raise ValueError(
                f"rank {trace.rank}: call {int(calls['seq'].iat[i])} uses communicator {cid!r}, "
                "which is not in the rank's communicators table"
            )
        c = comm_index[cid]
        name = str(names[i]).lower()
        p2p = bool(is_p2p[i])
        if p2p:
            p2p_seen[c] = p2p_seen.get(c, 0) + 1
        if p2p and rooted[i]:  # a scatter's or gather's sends: one collective of the communicator per group
            if depth > 0 and c in rooted_in_group:
                ops[i] = NOP
                continue
            key = (c, "rooted")
            op = CommOp(int(i), c, False, -1 - counters.get(key, 0))
            if depth > 0:
                rooted_in_group.add(c)
        elif p2p:
            if np.isnan(peers[i]):
                raise ValueError(f"rank {trace.rank}: {names[i]} call {int(calls['seq'].iat[i])} has no peer_rank")
            peer, send = int(peers[i]), "send" in name
            key = (c, peer, send)
            op = CommOp(int(i), c, True, counters.get(key, 0), peer, send)
        else:
            key = (c,)
            if np.isnan(seqs[i]):
                order = counters.get(key, 0)
            else:  # the collectives of the communicator alone, wherever its numbering counts sends and receives
                order = int(seqs[i]) - (p2p_seen.get(c, 0) if cid in counts_p2p else 0)
            op = CommOp(int(i), c, False, order)
        counters[key] = counters.get(key, 0) + 1
        if depth > 0:
            pending.append(op)
            ops[i] = NOP
        else:
            arg[i] = len(launches)
            launches.append([op])
            launch_call.append(int(i))
    if pending:  # a group never closed: launch what it holds at its last member
        last = pending[-1].call
        ops[last], arg[last] = COLL, len(launches)
        launches.append(pending)
        launch_call.append(last)
    return launches, launch_call
