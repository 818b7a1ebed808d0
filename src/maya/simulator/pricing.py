"""Price every program with a `DurationProvider` (Triton GEMM templates slowed by their tile's fit,
`launch_shape`): kernels and host time once per program, collectives
once per distinct layout (a deduplicated copy whose groups span other nodes or GPUs, or whose sends and
receives cross other links, gets its own collective times)."""

from __future__ import annotations

import functools

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
    coll = _with_layout(frame, program, layouts)
    for column in LAYOUT_COLUMNS:  # into copies: a frame's columns may be a trace's read-only buffers
        written = frame[column].copy()
        written.loc[coll.index] = coll[column]
        frame[column] = written
    return frame


def permutation(frame: pd.DataFrame, source: Program, order: np.ndarray) -> functools.partial[pd.DataFrame] | None:
    """`frame` (a rebuilt stage's priced frame) built again from `source`'s (the captured stage's program it was
    rebuilt from) as its rows `order` with the columns that differ kept (times, peers, framework time, layouts:
    a few of its columns); None when `source` is not priced or its columns are not `frame`'s."""
    if source.frame is None or list(source.frame.columns) != list(frame.columns):
        return None
    base = source.frame.take(order).reset_index(drop=True)
    # copies: a column of `frame` may be a view of a block of several, which it would keep
    kept = {name: frame[name].copy() for name in frame.columns if not frame[name].equals(base[name])}
    return functools.partial(_permuted, source, order, kept)


def _permuted(source: Program, order: np.ndarray, kept: dict[str, pd.Series]) -> pd.DataFrame:
    """`source`'s priced frame, rows `order`, with the columns `kept` (`permutation`)."""
    frame = source.frame.take(order).reset_index(drop=True)
    for name, values in kept.items():
        frame[name] = values
    return frame


def _with_layout(frame: pd.DataFrame, program: Program, layouts: list[tuple]) -> pd.DataFrame:
    """The collective rows of `frame` with the replica's sizes, node counts and local GPUs."""
    calls = [op.call for launch in program.launches for op in launch]
    rows = frame.iloc[calls].copy()
    rows["comm_size"] = [x[0] for x in layouts]
    rows["comm_nodes"] = [x[1] for x in layouts]
    rows["comm_gpus"] = [x[2] for x in layouts]
    return rows


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
    by_layout: dict[tuple, np.ndarray] = {}
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
        layout = (program.rank, tuple(layouts))
        if layout not in by_layout:
            if not len(program.device):  # the program's first layout: price everything
                derive = functools.partial(
                    laid_out_frame, program, traces, (iterations or {}).get(program.rank), layouts
                )
                if isinstance(program, RebuiltProgram):
                    frame = derive()
                    trace = traces.ranks[program.rank]
                    source = next(r.program for r in replicas if r.program.rank == trace.device["rebuilt_from"])
                    program.derive = permutation(frame, source, trace.order()) or derive
                else:
                    program.frame = frame = derive()
                host = provider.host_ns(frame)
                if not provider.measures_host_time:
                    host = host + host_factor * frame["framework_ns"].to_numpy()
                program.price(
                    provider.device_ns(frame, hardware) * launch_factor(frame, hardware),
                    host,
                    provider.launch_ns(frame),
                )
                by_layout[layout] = program.device
            else:
                coll = _with_layout(program.frame, program, layouts)
                device = program.device.copy()
                if len(coll):
                    device[coll.index.to_numpy()] = np.rint(np.maximum(provider.device_ns(coll, hardware), 0))
                by_layout[layout] = device
        devices.append(by_layout[layout])
    return devices
