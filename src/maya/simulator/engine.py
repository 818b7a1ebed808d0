"""The discrete-event replay of every rank.

Per rank, a host thread issues the calls in order, each taking its host time; every stream is a FIFO
resource executing its items (device work, event records and waits, collective launches) in issue
order. An item whose stream is idle runs at once: the hot path, with no event, queue entry or object
per call. Device work becomes ready when its call returns, plus the call's launch delay (measured traces:
how long after the call its work started on an idle stream). Once a stream's head blocks — a wait on an event version not yet complete, a collective whose
peers have not all arrived — the stream's later items are queued implicitly: the stream keeps the index
of its head, each program links every item to the next one on its stream, and a queued item only
notes its issue time. A collective's members all finish at `latest arrival + duration`; p2p send/recv
pairs likewise. When a head unblocks, its stream goes on a FIFO of ready streams, drained before the
next timed event. Host synchronisations block the host until their condition holds; a `HostResume`
event (on a heap, in time order) then continues it. Results do not depend on the order in which ready
work is processed: every time is a max-plus function of its dependencies. Ranks that replay alike (the same
program and device times, collectives joining the same kinds of peers: `fold`) are replayed once per class.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .fold import fold
from .opcodes import COLL, DEVICE_SYNC, EVENT_SYNC, NOP, RECORD, WAIT, WORK, WORK_SYNC
from .program import Program
from .topology import GlobalComm, Replica

IDLE = -1
"""`head` of a stream with no issued item left to run."""


class Deadlock(RuntimeError):
    """Some ranks can never continue: unmatched collectives or waits."""


class Event:
    """A timed event: it knows what to do when its time comes. Per-call work does not go through events (the
    engine walks each rank's calls in a tight loop, and ready streams go on a FIFO); timed events mark where a
    host thread continues after a synchronisation."""

    __slots__ = ("time",)

    def __init__(self, time: int):
        self.time = time

    def handle(self, engine: Engine) -> None:
        raise NotImplementedError


class HostResume(Event):
    """A rank's host thread continues issuing calls."""

    __slots__ = ("rank",)

    def __init__(self, time: int, rank: int):
        super().__init__(time)
        self.rank = rank

    def handle(self, engine: Engine) -> None:
        engine.run_host(self.rank)


class _Rank:
    """Mutable replay state of one simulated rank. Per call (index i): `opcode`, `stream` (index into the
    program's streams), `arg` (event record id, launch id or -1), `device_ns`, `host_ns`, `launch_delay`
    and `next_on_stream` (the next call on the same stream, or -1); per stream: `stream_end` (when its
    last issued work ends) and `stream_head` (first issued item not yet run, `IDLE` when none); per
    launch of collectives: `launch_arrival` (when it reached its stream's head), `launch_ready` (when the peers
    of its last operation had all arrived), `launch_end`,
    `launch_pending` (operations not yet released), `launch_keys`, `launch_durations`, `launch_stream`."""

    __slots__ = (
        "rank",
        "opcode",
        "stream",
        "arg",
        "device_ns",
        "host_ns",
        "launch_delay",
        "next_on_stream",
        "n_calls",
        "next_call",
        "host_time",
        "stream_end",
        "stream_head",
        "issue_time",
        "event_done",
        "end",
        "launch_arrival",
        "launch_ready",
        "launch_end",
        "launch_pending",
        "launch_keys",
        "launch_durations",
        "launch_stream",
        "blocked_on",
        "host_waits",
    )

    def __init__(self, replica: Replica, lists: tuple, launch_durations: list[list[int]]):
        p = replica.program
        self.rank = replica.rank
        (self.opcode, self.stream, self.arg, self.device_ns, self.host_ns, self.launch_delay, self.next_on_stream) = (
            lists
        )
        self.n_calls = p.n
        self.next_call, self.host_time = 0, 0
        """The host thread: the next call it issues, and when."""
        self.stream_end = [0] * len(p.stream_ids)
        self.stream_head = [IDLE] * len(p.stream_ids)
        self.issue_time = array("q", bytes(8 * p.n))
        """Issue time of queued items."""
        self.event_done = [-1] * p.n_records
        """Per event record id: when it completes (-1: not yet)."""
        self.end = array("q", bytes(8 * p.n))
        n_launch = len(p.launches)
        self.launch_arrival = [-1] * n_launch
        self.launch_ready = [0] * n_launch
        self.launch_end = [0] * n_launch
        self.launch_pending = [len(launch) for launch in p.launches]
        self.launch_keys = replica.keys
        self.launch_durations = launch_durations
        self.launch_stream = [int(p.stream[c]) for c in p.launch_call]
        self.blocked_on = -1
        """The host synchronisation call the host thread waits in (-1: none)."""
        self.host_waits: list[tuple[int, int]] = []
        """(call, ns) the host thread waited after each synchronisation that blocked it."""


@dataclass
class RankResult:
    """Simulated times of one rank's calls (ns from the start of the replay)."""

    rank: int
    end: np.ndarray
    """Device end of each WORK / WORK_SYNC / COLL call (0 elsewhere)."""
    issue: np.ndarray
    """Host time at which each call returns (its device work becomes ready then, after its launch delay)."""
    wait: np.ndarray
    """Host time spent blocked after each call (synchronisations)."""
    launch_start: np.ndarray
    """Per launch: when it reached the head of its stream (arrival)."""
    launch_ready: np.ndarray
    """Per launch: when every peer of its operations had arrived (from `launch_start` to here it waits for
    them: a pipeline stage's bubble, a straggler; from here to `launch_end` it moves data)."""
    launch_end: np.ndarray
    records: np.ndarray
    """Per event record id (`Program.arg` of RECORD calls): when the event completes (-1: never)."""


def _interned(values: np.ndarray, numbers: dict[int, int]) -> list[int]:
    """`values.tolist()` with equal numbers one object, the one `numbers` holds (added when new): a job's device and
    host times repeat call after call and program after program, so its lists cost a pointer per call, not an
    integer object too."""
    codes, distinct = pd.factorize(values)
    objects = [numbers.setdefault(v, v) for v in distinct.tolist()]
    return list(map(objects.__getitem__, codes.tolist()))


def _sequences(p: Program, device: np.ndarray, numbers: dict[int, int]) -> tuple[tuple, list[list[int]]]:
    """A program's per-call sequences as `_Rank` reads them (opcode, stream, arg, device, host and launch delay,
    next item on the stream) and its collective durations per launch. Lists, whose items the replay's loops read
    fastest, where their numbers repeat (small ones are Python's own objects; times are `_interned`); arrays of
    machine integers for the call and record numbers, which do not repeat and are read at events, waits and
    launches only (as lists they would cost an integer object per call: ~1 GB for a 1T-parameter job's 64
    pipeline stages)."""
    durations = device[p.launch_ops] if len(p.launch_ops) else np.zeros(0, np.int64)
    per_launch = np.split(durations, np.cumsum([len(launch) for launch in p.launches])[:-1])
    sequences = (
        p.opcodes.tolist(),
        p.stream.tolist(),
        array("q", p.arg.astype(np.int64).tobytes()),
        _interned(device, numbers),
        _interned(p.host, numbers),
        _interned(p.ready, numbers),
        array("q", p.stream_successors().astype(np.int64).tobytes()),
    )
    return sequences, [d.tolist() for d in per_launch]


class Engine:
    def __init__(
        self,
        replicas: list[Replica],
        devices: list[np.ndarray],
        comms: list[GlobalComm],
        *,
        shortest_collective: bool = False,
        folded: bool = True,
        statuses: Mapping[int, str] | None = None,
    ):
        """`devices[r]`: device time per call of replica r (its program's, collectives priced for its
        communicators). `shortest_collective`: a collective lasts its shortest member's duration
        (measured durations include waiting for peers) instead of the longest. `folded`: replay one rank per
        class of ranks that replay alike (`fold`; the results are the same). `statuses`: each rank's capture
        status (`trace.capture_statuses`), which a deadlock's message names."""
        self.replicas, self.devices = replicas, devices
        self.statuses = dict(statuses or {})
        self.folding = fold(replicas, devices, comms) if folded else None
        if self.folding is not None:
            chosen = self.folding.representatives
            replicas = [replace(replicas[i], keys=keys) for i, keys in zip(chosen, self.folding.keys)]
            devices = [devices[i] for i in chosen]
        cache: dict[tuple[int, int], tuple] = {}
        numbers: dict[int, int] = {}
        self.ranks: list[_Rank] = []
        for replica, device in zip(replicas, devices):
            p = replica.program
            key = (id(p), id(device))
            if key not in cache:
                cache[key] = _sequences(p, device, numbers)
            lists, launch_durations = cache[key]
            self.ranks.append(_Rank(replica, lists, launch_durations))
        self.comms = comms
        self.shortest = shortest_collective
        self.pending: dict[tuple, list] = {}
        self.waiters: dict[tuple[int, int], list[int]] = {}
        self.heap: list[tuple[int, int, Event]] = []
        self.ready: deque[tuple[int, int]] = deque()
        self.counter = 0
        self.events = 0

    def schedule(self, event: Event) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (event.time, self.counter, event))

    def run(self) -> list[RankResult]:
        """Every replica's result, in the order of the replicas."""
        if self.folding is None:
            return self._run()
        try:
            results = self._run()
        except Deadlock:  # the whole replay names the stuck ranks one by one
            return Engine(
                self.replicas,
                self.devices,
                self.comms,
                shortest_collective=self.shortest,
                folded=False,
                statuses=self.statuses,
            ).run()
        return [replace(results[k], rank=r.rank) for k, r in zip(self.folding.classes, self.replicas)]

    def _run(self) -> list[RankResult]:
        for r in range(len(self.ranks)):
            self.schedule(HostResume(0, r))
        heap, ready, drain = self.heap, self.ready, self.drain
        while heap or ready:
            while ready:
                drain(*ready.popleft())
            if heap:
                _, _, event = heapq.heappop(heap)
                self.events += 1
                event.handle(self)
        stuck = [
            st
            for st in self.ranks
            if st.next_call < st.n_calls or st.blocked_on >= 0 or max(st.stream_head, default=IDLE) >= 0
        ]
        if stuck:  # a folded replay's keys are class quotients: the unfolded rerun words the message
            raise Deadlock() if self.folding is not None else Deadlock(self._deadlock_message(stuck))
        return [self._result(st) for st in self.ranks]

    # ------------------------------------------------------------------ host thread

    def run_host(self, r: int) -> None:
        """Issue rank r's calls until its host blocks or its calls run out."""
        st = self.ranks[r]
        op, stream, arg, dev, host, ready = st.opcode, st.stream, st.arg, st.device_ns, st.host_ns, st.launch_delay
        tails, head, issued, ev, end = st.stream_end, st.stream_head, st.issue_time, st.event_done, st.end
        t = st.host_time
        for i in range(st.next_call, st.n_calls):
            o = op[i]
            t += host[i]
            if o == WORK or o == WORK_SYNC:
                s = stream[i]
                if head[s] < 0:
                    b = tails[s]
                    a = t + ready[i]
                    if a > b:
                        b = a
                    b += dev[i]
                    end[i] = b
                    tails[s] = b
                else:
                    issued[i] = t + ready[i]
                if o == WORK:
                    continue
            elif o == NOP:
                continue
            elif o == RECORD:
                s = stream[i]
                if head[s] < 0:
                    b = tails[s]
                    ev[arg[i]] = b if b > t else t
                else:
                    issued[i] = t
                continue
            elif o == WAIT:
                s, k = stream[i], arg[i]
                if head[s] >= 0:
                    issued[i] = t
                elif k >= 0:
                    b = ev[k]
                    if b < 0:
                        issued[i] = t
                        head[s] = i
                        self._wait_for(r, k, s)
                    elif b > tails[s]:
                        tails[s] = b
                continue
            elif o == COLL:
                s = stream[i]
                issued[i] = t + ready[i]
                if head[s] < 0:
                    head[s] = i
                    st.next_call = i + 1
                    self.drain(r, s)
                continue
            # a host synchronisation (a WORK_SYNC's device work was issued above)
            done = self._ready(st, i)
            if done < 0:
                st.next_call, st.host_time, st.blocked_on = i + 1, t, i
                return
            if done > t:
                st.host_waits.append((i, done - t))
                t = done
        st.next_call, st.host_time = st.n_calls, t

    def _ready(self, st: _Rank, i: int) -> int:
        """When host synchronisation call i of `st` returns; -1 while its condition does not hold."""
        o = st.opcode[i]
        if o == EVENT_SYNC:
            k = st.arg[i]
            return st.event_done[k] if k >= 0 else 0
        if o == DEVICE_SYNC:
            return -1 if max(st.stream_head) >= 0 else max(st.stream_end, default=0)
        s = st.stream[i]  # STREAM_SYNC, WORK_SYNC
        return -1 if st.stream_head[s] >= 0 else st.stream_end[s]

    def _unblock(self, r: int) -> None:
        st = self.ranks[r]
        ready = self._ready(st, st.blocked_on)
        if ready < 0:
            return
        if ready > st.host_time:
            st.host_waits.append((st.blocked_on, ready - st.host_time))
            st.host_time = ready
        st.blocked_on = -1
        self.schedule(HostResume(st.host_time, r))

    # ------------------------------------------------------------------ streams

    def drain(self, r: int, s: int) -> None:
        """Run the issued items of rank r's stream s from its head until they run out or one blocks."""
        st = self.ranks[r]
        op, arg, dev, end, ev, issued, succ = (
            st.opcode,
            st.arg,
            st.device_ns,
            st.end,
            st.event_done,
            st.issue_time,
            st.next_on_stream,
        )
        i, pc, tail = st.stream_head[s], st.next_call, st.stream_end[s]
        recorded = False
        while 0 <= i < pc:
            o = op[i]
            ti = issued[i]
            if o == WORK or o == WORK_SYNC:
                if ti > tail:
                    tail = ti
                tail += dev[i]
                end[i] = tail
            elif o == COLL:
                L = arg[i]
                if st.launch_arrival[L] < 0:
                    st.launch_arrival[L] = tail if tail > ti else ti
                    self._arrive(r, L)
                if st.launch_pending[L]:
                    break
                end[i] = tail = st.launch_end[L]
            elif o == RECORD:
                k = arg[i]
                ev[k] = tail if tail > ti else ti
                recorded = True
                for s2 in self.waiters.pop((r, k), ()):
                    self.ready.append((r, s2))
            else:  # WAIT
                k = arg[i]
                if k >= 0:
                    b = ev[k]
                    if b < 0:
                        self._wait_for(r, k, s)
                        break
                    if b > tail:
                        tail = b
            i = succ[i]
        else:
            i = IDLE
        st.stream_head[s], st.stream_end[s] = i, tail
        if st.blocked_on >= 0 and (i < 0 or recorded):
            self._unblock(r)

    def _wait_for(self, r: int, k: int, s: int) -> None:
        streams = self.waiters.setdefault((r, k), [])
        if s not in streams:
            streams.append(s)

    # ------------------------------------------------------------------ collectives

    def _arrive(self, r: int, L: int) -> None:
        """Rank r's launch L reached its stream's head: register each of its operations."""
        st = self.ranks[r]
        start = st.launch_arrival[L]
        pending, shortest = self.pending, self.shortest
        for (key, expected), duration in zip(st.launch_keys[L], st.launch_durations[L]):
            entry = pending.get(key)
            if entry is None:
                entry = [expected, start, duration, []]
                if expected > 1:
                    pending[key] = entry
            else:
                if start > entry[1]:
                    entry[1] = start
                if (duration < entry[2]) if shortest else (duration > entry[2]):
                    entry[2] = duration
            entry[0] -= 1
            entry[3].append((r, L))
            if entry[0] <= 0:
                pending.pop(key, None)
                self._release(entry[1], entry[1] + entry[2], entry[3], r, L)

    def _release(self, start: int, finish: int, members: list[tuple[int, int]], r: int, L: int) -> None:
        """An operation whose members have all arrived by `start` completes at `finish` for all of them; a
        launch whose operations have all completed lets its stream continue."""
        ranks, ready = self.ranks, self.ready
        for r2, L2 in members:
            st = ranks[r2]
            if start > st.launch_ready[L2]:
                st.launch_ready[L2] = start
            st.launch_pending[L2] -= 1
            if finish > st.launch_end[L2]:
                st.launch_end[L2] = finish
            if not st.launch_pending[L2] and (r2 != r or L2 != L):
                ready.append((r2, st.launch_stream[L2]))

    # ------------------------------------------------------------------ results

    def _result(self, st: _Rank) -> RankResult:
        host = np.asarray(st.host_ns, dtype=np.int64)
        wait = np.zeros(st.n_calls, dtype=np.int64)
        for i, w in st.host_waits:
            wait[i] += w
        issue = np.cumsum(host) + np.concatenate([[0], np.cumsum(wait)[:-1]]) if st.n_calls else host
        return RankResult(
            rank=st.rank,
            end=np.frombuffer(st.end, dtype=np.int64).copy(),
            issue=issue,
            wait=wait,
            launch_start=np.asarray(st.launch_arrival, dtype=np.int64),
            launch_ready=np.asarray(st.launch_ready, dtype=np.int64),
            launch_end=np.asarray(st.launch_end, dtype=np.int64),
            records=np.asarray(st.event_done, dtype=np.int64),
        )

    def _ended_without(self, ended: list[int]) -> str:
        """Why peers ended their replay without a collective: their captures are incomplete (named), complete and
        different, or either when a status is unknown."""
        statuses = {rank: self.statuses.get(rank) for rank in ended}
        differ = (
            "made different collectives (isolated ranks can decide differently on a device value, e.g. a step skipped "
            "on an overflow check); capture one rank: maya emulate --ranks 0"
        )
        if None in statuses.values():
            return f"rank(s) {ended} ended without it: their captures stopped early (logs/rank<N>.txt) or {differ}"
        short = {rank: status for rank, status in statuses.items() if status != "complete"}
        if short:
            named = ", ".join(f"rank {rank}: {status}" for rank, status in short.items())
            return (
                f"rank(s) {ended} ended without it: their captures did not complete ({named}; the run's "
                "logs/rank<N>.txt say why), so their calls stop where the script did"
            )
        return f"rank(s) {ended} ended without it, their captures complete: the ranks' captures {differ}"

    def _deadlock_message(self, stuck: list[_Rank]) -> str:
        lines, ended = [], set()
        finished = {st.rank for st in self.ranks} - {st.rank for st in stuck}
        for key, entry in list(self.pending.items())[:5]:
            arrived = sorted(self.ranks[r].rank for r, _ in entry[3])
            comm = self.comms[key[0]]
            if len(key) == 2:
                absent = sorted(set(comm.members) - set(arrived))
                ended |= finished & set(absent)
                lines.append(f"collective #{key[1]} on {comm.comm_id}: ranks {arrived} arrived, {absent} never did")
            else:
                lines.append(f"p2p {key[1]}->{key[2]} #{key[3]} on {comm.comm_id}: only rank {arrived} arrived")
        if ended:  # a peer replayed its whole capture without the collective: the captures differ, not the timing
            lines.append(self._ended_without(sorted(ended)))
        ranks = ", ".join(str(st.rank) for st in stuck[:10])
        return f"simulation deadlocked: rank(s) {ranks}{' ...' if len(stuck) > 10 else ''} cannot continue" + (
            "; " + "; ".join(lines) if lines else "; waits on events never recorded"
        )
