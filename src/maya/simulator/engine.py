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
work is processed: every time is a max-plus function of its dependencies.
"""
from __future__ import annotations

import heapq
from array import array
from collections import deque
from dataclasses import dataclass

import numpy as np

from .events import Event, HostResume
from .opcodes import COLL, DEVICE_SYNC, EVENT_SYNC, NOP, RECORD, WAIT, WORK, WORK_SYNC
from .topology import GlobalComm, Replica

IDLE = -1
"""`head` of a stream with no issued item left to run."""


class Deadlock(RuntimeError):
    """Some ranks can never continue: unmatched collectives or waits."""


class _Rank:
    """Mutable replay state of one simulated rank."""

    __slots__ = ("rank", "op", "stream", "arg", "dev", "host", "ready", "succ", "n", "pc", "t", "tails", "head",
                 "issued", "ev", "end", "lstart", "lend", "lrem", "lkeys", "ldur", "lstream", "blocked", "jumps")

    def __init__(self, replica: Replica, lists: tuple, launch_durations: list[list[int]]):
        p = replica.program
        self.rank = replica.rank
        self.op, self.stream, self.arg, self.dev, self.host, self.ready, self.succ = lists
        self.n = p.n
        self.pc, self.t = 0, 0
        self.tails = [0] * len(p.stream_ids)
        self.head = [IDLE] * len(p.stream_ids)
        self.issued = array("q", bytes(8 * p.n))
        """Issue time of queued items."""
        self.ev = [-1] * p.n_records
        self.end = array("q", bytes(8 * p.n))
        n_launch = len(p.launches)
        self.lstart = [-1] * n_launch
        self.lend = [0] * n_launch
        self.lrem = [len(launch) for launch in p.launches]
        self.lkeys = replica.keys
        self.ldur = launch_durations
        self.lstream = [int(p.stream[c]) for c in p.launch_call]
        self.blocked = -1
        self.jumps: list[tuple[int, int]] = []


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
    launch_end: np.ndarray
    records: np.ndarray
    """Per event record id (`Program.arg` of RECORD calls): when the event completes (-1: never)."""


class Engine:
    def __init__(self, replicas: list[Replica], devices: list[np.ndarray], comms: list[GlobalComm], *,
                 shortest_collective: bool = False):
        """`devices[r]`: device time per call of replica r (its program's, collectives priced for its
        communicators). `shortest_collective`: a collective lasts its shortest member's duration
        (measured durations include waiting for peers) instead of the longest."""
        cache: dict[tuple[int, int], tuple] = {}
        self.ranks: list[_Rank] = []
        for replica, device in zip(replicas, devices):
            p = replica.program
            key = (id(p), id(device))
            if key not in cache:
                durations = device[p.launch_ops] if len(p.launch_ops) else np.zeros(0, np.int64)
                per_launch = np.split(durations, np.cumsum([len(launch) for launch in p.launches])[:-1])
                cache[key] = ((p.opcodes.tolist(), p.stream.tolist(), p.arg.tolist(), device.tolist(),
                               p.host.tolist(), p.ready.tolist(), p.stream_successors().tolist()),
                              [d.tolist() for d in per_launch])
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
        stuck = [st for st in self.ranks if st.pc < st.n or st.blocked >= 0 or max(st.head, default=IDLE) >= 0]
        if stuck:
            raise Deadlock(self._deadlock_message(stuck))
        return [self._result(st) for st in self.ranks]

    # ------------------------------------------------------------------ host thread

    def run_host(self, r: int) -> None:
        """Issue rank r's calls until its host blocks or its calls run out."""
        st = self.ranks[r]
        op, stream, arg, dev, host, ready = st.op, st.stream, st.arg, st.dev, st.host, st.ready
        tails, head, issued, ev, end = st.tails, st.head, st.issued, st.ev, st.end
        i, t, n = st.pc, st.t, st.n
        while i < n:
            o = op[i]
            t += host[i]
            if o == WORK:
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
            elif o == NOP:
                pass
            elif o == RECORD:
                s = stream[i]
                if head[s] < 0:
                    b = tails[s]
                    ev[arg[i]] = b if b > t else t
                else:
                    issued[i] = t
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
            elif o == COLL:
                s = stream[i]
                issued[i] = t + ready[i]
                if head[s] < 0:
                    head[s] = i
                    st.pc = i + 1
                    self.drain(r, s)
            else:  # host synchronisation
                if o == WORK_SYNC:
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
                done = self._ready(st, i)
                if done < 0:
                    st.pc, st.t, st.blocked = i + 1, t, i
                    return
                if done > t:
                    st.jumps.append((i, done - t))
                    t = done
            i += 1
        st.pc, st.t = n, t

    def _ready(self, st: _Rank, i: int) -> int:
        """When host synchronisation call i of `st` returns; -1 while its condition does not hold."""
        o = st.op[i]
        if o == EVENT_SYNC:
            k = st.arg[i]
            return st.ev[k] if k >= 0 else 0
        if o == DEVICE_SYNC:
            return -1 if max(st.head) >= 0 else max(st.tails, default=0)
        s = st.stream[i]  # STREAM_SYNC, WORK_SYNC
        return -1 if st.head[s] >= 0 else st.tails[s]

    def _unblock(self, r: int) -> None:
        st = self.ranks[r]
        ready = self._ready(st, st.blocked)
        if ready < 0:
            return
        if ready > st.t:
            st.jumps.append((st.blocked, ready - st.t))
            st.t = ready
        st.blocked = -1
        self.schedule(HostResume(st.t, r))

    # ------------------------------------------------------------------ streams

    def drain(self, r: int, s: int) -> None:
        """Run the issued items of rank r's stream s from its head until they run out or one blocks."""
        st = self.ranks[r]
        op, arg, dev, end, ev, issued, succ = st.op, st.arg, st.dev, st.end, st.ev, st.issued, st.succ
        i, pc, tail = st.head[s], st.pc, st.tails[s]
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
                if st.lstart[L] < 0:
                    st.lstart[L] = tail if tail > ti else ti
                    self._arrive(r, L)
                if st.lrem[L]:
                    break
                end[i] = tail = st.lend[L]
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
        st.head[s], st.tails[s] = i, tail
        if st.blocked >= 0 and (i < 0 or recorded):
            self._unblock(r)

    def _wait_for(self, r: int, k: int, s: int) -> None:
        streams = self.waiters.setdefault((r, k), [])
        if s not in streams:
            streams.append(s)

    # ------------------------------------------------------------------ collectives

    def _arrive(self, r: int, L: int) -> None:
        """Rank r's launch L reached its stream's head: register each of its operations."""
        st = self.ranks[r]
        start = st.lstart[L]
        pending, shortest = self.pending, self.shortest
        for (key, expected), duration in zip(st.lkeys[L], st.ldur[L]):
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
                self._release(entry[1] + entry[2], entry[3], r, L)

    def _release(self, finish: int, members: list[tuple[int, int]], r: int, L: int) -> None:
        """An operation completes at `finish` for all its members; a launch whose operations have all
        completed lets its stream continue."""
        ranks, ready = self.ranks, self.ready
        for r2, L2 in members:
            st = ranks[r2]
            st.lrem[L2] -= 1
            if finish > st.lend[L2]:
                st.lend[L2] = finish
            if not st.lrem[L2] and (r2 != r or L2 != L):
                ready.append((r2, st.lstream[L2]))

    # ------------------------------------------------------------------ results

    def _result(self, st: _Rank) -> RankResult:
        host = np.asarray(st.host, dtype=np.int64)
        wait = np.zeros(st.n, dtype=np.int64)
        for i, w in st.jumps:
            wait[i] += w
        issue = np.cumsum(host) + np.concatenate([[0], np.cumsum(wait)[:-1]]) if st.n else host
        return RankResult(rank=st.rank, end=np.frombuffer(st.end, dtype=np.int64).copy(), issue=issue, wait=wait,
                          launch_start=np.asarray(st.lstart, dtype=np.int64),
                          launch_end=np.asarray(st.lend, dtype=np.int64),
                          records=np.asarray(st.ev, dtype=np.int64))

    def _deadlock_message(self, stuck: list[_Rank]) -> str:
        lines = []
        for key, entry in list(self.pending.items())[:5]:
            arrived = sorted(self.ranks[r].rank for r, _ in entry[3])
            comm = self.comms[key[0]]
            if len(key) == 2:
                absent = sorted(set(comm.members) - set(arrived))
                lines.append(f"collective #{key[1]} on {comm.comm_id}: ranks {arrived} arrived, "
                             f"{absent} never did")
            else:
                lines.append(f"p2p {key[1]}->{key[2]} #{key[3]} on {comm.comm_id}: only rank {arrived} arrived")
        ranks = ", ".join(str(st.rank) for st in stuck[:10])
        return (f"simulation deadlocked: rank(s) {ranks}{' ...' if len(stuck) > 10 else ''} cannot continue"
                + ("; " + "; ".join(lines) if lines else "; waits on events never recorded"))
