"""Price every program with a `DurationProvider` (Triton GEMM templates slowed by their tile's fit,
`launch_shape`): kernels and host time once per program, collectives
once per distinct layout (a deduplicated copy whose groups span other nodes or GPUs, or whose sends and
receives cross other links, gets its own collective times)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from .durations import DurationProvider
from .durations.framework import emulated, framework_ns
from .iterations import Iterations
from .launch_shape import launch_factor
from .opcodes import COLL, NOP
from .program import Program, RebuiltProgram
from .topology import GlobalComm, Replica
from .trace import TraceSet
from .work import work_frame


def priced_frame(program: Program, traces: TraceSet, iterations: Iterations | None = None) -> pd.DataFrame:
    """api_calls + `opcode` + work columns + `framework_ns` (the framework's host time before each emulated call on
    the emulating CPU, `durations.framework`, over the program's `iterations`; 0 on measured calls). Every collective
    operation (grouped ones too) is a COLL row; a group's launching `ncclGroupEnd` carries no work of its own."""
    opcodes = program.opcodes.copy()
    opcodes[program.launch_call] = NOP
    for launch in program.launches:
        opcodes[[op.call for op in launch]] = COLL
    trace = traces.ranks[program.rank]
    work = work_frame(trace, opcodes)
    frame = pd.concat([trace.calls, work], axis=1)
    frame["opcode"] = opcodes
    timed_here = emulated(trace.calls, traces.info.get("source"))
    frame["framework_ns"] = (
        np.where(timed_here, framework_ns(trace.calls, trace.ops, program.opcodes, iterations), 0.0)
        if timed_here.any()
        else 0.0
    )
    frame["comm_size"] = np.nan
    frame["comm_nodes"] = np.nan
    frame["comm_gpus"] = None
    return frame


LAYOUT_COLUMNS = ["comm_size", "comm_nodes", "comm_gpus"]


def _layouts(program: Program, replica: Replica, comms: list[GlobalComm], traces: TraceSet) -> list[tuple]:
    """Per collective operation of the replica: (ranks, nodes, local GPUs) it spans. A collective spans its
    communicator (local GPUs: the members on this rank's node); a send or recv spans its two ends (local
    GPUs: both ends when they share a node), one rank when it is its own peer (an all-to-all's share for itself,
    which NCCL copies on the GPU: no transfer, as a one-rank collective)."""
    node = traces.node_of(replica.rank)
    by_comm: dict[int, tuple] = {}
    out = []
    for launch, keys in zip(program.launches, replica.keys):
        for op, (key, _) in zip(launch, keys):
            if op.p2p:
                ends = key[1:3]
                if ends[0] == ends[1]:
                    out.append((1, 1, (traces.local_of(ends[0]),)))
                    continue
                nodes = len({traces.node_of(r) for r in ends})
                out.append((2, nodes, tuple(traces.local_of(r) for r in ends) if nodes == 1 else ()))
                continue
            g = replica.comms[op.comm]
            if g not in by_comm:
                members = comms[g].members
                by_comm[g] = (
                    len(members),
                    comms[g].nodes,
                    tuple(sorted(traces.local_of(r) for r in members if traces.node_of(r) == node)),
                )
            out.append(by_comm[g])
    return out


def laid_out_frame(
    program: Program, traces: TraceSet, iterations: Iterations | None, layouts: list[tuple]
) -> pd.DataFrame:
    """`priced_frame` with the collective rows' layout columns (`LAYOUT_COLUMNS`) those of `layouts`."""
    frame = priced_frame(program, traces, iterations)
    coll = _with_layout(frame, program.launch_ops, layouts)
    for column in LAYOUT_COLUMNS:  # into copies: a frame's columns may be a trace's read-only buffers
        written = frame[column].copy()
        written.loc[coll.index] = coll[column]
        frame[column] = written
    return frame


def permutation(
    frame: pd.DataFrame, source: Program, order: Callable[[], np.ndarray]
) -> functools.partial[pd.DataFrame]:
    """`frame` (a rebuilt stage's priced frame) built again from `source`'s (the captured stage's program it was
    rebuilt from, priced first) as its rows `order()` with what differs patched in (`_patch`: times, call numbers
    and peers, framework time, a few rows of op shapes); ValueError when `source` is not priced or its columns are
    not `frame`'s."""
    if source.frame is None or list(source.frame.columns) != list(frame.columns):
        reason = "is not priced" if source.frame is None else "has other columns"
        raise ValueError(f"rank {source.rank}'s priced frame {reason}: a stage rebuilt from it cannot be priced as it")
    base = source.frame.take(order()).reset_index(drop=True)
    patches = {name: _patch(frame[name], base[name]) for name in frame.columns}
    return functools.partial(_permuted, source, order, {name: p for name, p in patches.items() if p is not None})


def _permuted(source: Program, order: Callable[[], np.ndarray], patches: dict[str, Patch]) -> pd.DataFrame:
    """`source`'s priced frame, rows `order()`, with the columns `patches` (`permutation`)."""
    frame = source.frame.take(order()).reset_index(drop=True)
    for name, patch in patches.items():
        frame[name] = patch.apply(frame[name])
    return frame


@dataclass(frozen=True)
class Rows:
    """A column that differs from its base in some rows: those rows and their values."""

    rows: np.ndarray
    values: pd.api.extensions.ExtensionArray

    def apply(self, base: pd.Series) -> pd.Series:
        values = base.array.copy()
        values[self.rows] = self.values
        return pd.Series(values, index=base.index, name=base.name)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.values.nbytes


@dataclass(frozen=True)
class Steps:
    """An integer column that differs from its base by a step function (a rebuilt stage's call times and numbers: one
    offset over each piece it moved): where the difference changes, and its values from there."""

    starts: np.ndarray
    offsets: np.ndarray

    def apply(self, base: pd.Series) -> pd.Series:
        lengths = np.diff(np.r_[self.starts, len(base)])
        return pd.Series(base.to_numpy() + np.repeat(self.offsets, lengths), index=base.index, name=base.name)

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.offsets.nbytes


@dataclass(frozen=True)
class Whole:
    """A column that differs from its base throughout (or in its dtype): the column itself."""

    values: pd.Series

    def apply(self, base: pd.Series) -> pd.Series:
        return pd.Series(self.values.array.copy(), index=base.index, name=base.name)

    @property
    def nbytes(self) -> int:
        return int(self.values.memory_usage(index=False, deep=True))


Patch = Rows | Steps | Whole


def _patch(column: pd.Series, base: pd.Series) -> Patch | None:
    """How `column` differs from `base` (same length), in the fewest bytes; None when it does not (`_differs`)."""
    if column.dtype != base.dtype:
        return Whole(column.copy())
    differs = _differs(column, base)
    if not differs.any():
        return None
    rows = np.flatnonzero(differs)
    options: list[Patch] = [Rows(rows, column.array[rows].copy())]
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iu":
        delta = column.to_numpy() - base.to_numpy()  # exact, wrapping or not: base + delta is column
        starts = np.flatnonzero(np.r_[True, delta[1:] != delta[:-1]])
        options.append(Steps(starts, delta[starts]))
    best = min(options, key=lambda p: p.nbytes)
    return best if best.nbytes < column.memory_usage(index=False, deep=True) else Whole(column.copy())


def _differs(column: pd.Series, base: pd.Series) -> np.ndarray:
    """Per row, whether `column`'s value is not `base`'s: numbers bit for bit, other values by `==`, missing values
    alike."""
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "fiub":
        bits = np.dtype(f"u{column.dtype.itemsize}")
        return column.to_numpy().view(bits) != base.to_numpy().view(bits)
    equal = column.array == base.array
    equal = equal.to_numpy(dtype=bool, na_value=False) if hasattr(equal, "to_numpy") else np.asarray(equal, dtype=bool)
    return ~equal & ~(column.isna().to_numpy() & base.isna().to_numpy())


def _with_layout(frame: pd.DataFrame, calls: np.ndarray, layouts: list[tuple]) -> pd.DataFrame:
    """The rows `calls` of `frame` (collective operations) with the sizes, node counts and local GPUs `layouts`."""
    rows = frame.iloc[calls].copy()
    rows["comm_size"] = [x[0] for x in layouts]
    rows["comm_nodes"] = [x[1] for x in layouts]
    rows["comm_gpus"] = [x[2] for x in layouts]
    return rows


def _relaid(
    program: Program,
    layouts: list[tuple],
    first: list[tuple],
    provider: DurationProvider,
    hardware: Hardware,
    known: dict[tuple, np.ndarray],
) -> np.ndarray:
    """`program.device` with its collective operations laid out as `layouts` instead of `first` (the layouts it was
    priced with): those laid out otherwise priced again (a collective's time is its own row's). Times that come out
    the same are the same array: `program.device` itself, else the one `known` holds for those layouts or those
    times (added when new), so a job's copies of a program hold one array per distinct set of times."""
    changed = [k for k, (ours, its) in enumerate(zip(layouts, first)) if ours != its]
    if not changed:
        return program.device
    laid_out = (program.rank, tuple((k, layouts[k]) for k in changed))
    if laid_out in known:
        return known[laid_out]
    calls = program.launch_ops[changed]
    times = program.device[calls]  # the new times in the device array's integers, cast as written into it
    rows = _with_layout(program.frame, calls, [layouts[k] for k in changed])
    times[:] = np.rint(np.maximum(provider.device_ns(rows, hardware), 0))
    differs = times != program.device[calls]
    calls, times = calls[differs], times[differs]
    timed = (program.rank, calls.tobytes(), times.tobytes())
    if not len(calls):
        known[laid_out] = program.device
    elif timed in known:
        known[laid_out] = known[timed]
    else:
        known[laid_out] = known[timed] = program.device.copy()
        known[timed][calls] = times
    return known[laid_out]


def price(
    traces: TraceSet,
    replicas: list[Replica],
    comms: list[GlobalComm],
    provider: DurationProvider,
    hardware: Hardware,
    host_factor: float = 0.0,
    iterations: dict[int, Iterations] | None = None,
) -> list[np.ndarray]:
    """Price each program (sets its `frame`, `device`, `host`) and return each replica's device times. A call's host
    time is the provider's plus, unless the provider measured it, the framework time before it (emulated calls
    only) times `host_factor` (the target host's time per second of the emulating CPU's; default 0: not added),
    read over each rank's `iterations`."""
    first: dict[int, list[tuple]] = {}  # per program, the layouts it was priced with
    known: dict[tuple, np.ndarray] = {}
    seen: dict[tuple, list[tuple]] = {}
    devices = []
    for replica in replicas:
        program = replica.program
        # without p2p, a replica's layouts follow from its program, communicators and node
        p2p = any(op.p2p for launch in program.launches for op in launch)
        same = None if p2p else (id(program), tuple(replica.comms), traces.node_of(replica.rank))
        layouts = seen.get(same) if same is not None else None
        if layouts is None:
            layouts = _layouts(program, replica, comms, traces)
            if same is not None:
                seen[same] = layouts
        if program.rank in first:
            devices.append(_relaid(program, layouts, first[program.rank], provider, hardware, known))
            continue
        # the program's first layout: price everything
        frame = laid_out_frame(program, traces, (iterations or {}).get(program.rank), layouts)
        if isinstance(program, RebuiltProgram):  # its captured stage's program (a lower rank) is priced
            trace = traces.ranks[program.rank]
            source = next(r.program for r in replicas if r.program.rank == trace.device["rebuilt_from"])
            program.derive = permutation(frame, source, trace.order)
        else:
            program.frame = frame
        host = provider.host_ns(frame)
        if not provider.measures_host_time:
            host = host + host_factor * frame["framework_ns"].to_numpy()
        program.price(
            provider.device_ns(frame, hardware) * launch_factor(frame, hardware), host, provider.launch_ns(frame)
        )
        first[program.rank] = layouts
        devices.append(program.device)
    return devices
