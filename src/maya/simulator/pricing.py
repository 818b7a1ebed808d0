"""Price every program with a `DurationProvider`: kernels and host time once per program, collectives
once per distinct communicator layout (a deduplicated copy whose groups span other nodes gets its
own collective times)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from .durations import DurationProvider
from .opcodes import COLL, NOP
from .program import Program
from .topology import GlobalComm, Replica
from .trace import TraceSet
from .work import work_frame


def priced_frame(program: Program, traces: TraceSet) -> pd.DataFrame:
    """api_calls + `opcode` + work columns. Every collective operation (grouped ones too) is a COLL row;
    a group's launching `ncclGroupEnd` carries no work of its own."""
    opcodes = program.opcodes.copy()
    opcodes[program.launch_call] = NOP
    for launch in program.launches:
        opcodes[[op.call for op in launch]] = COLL
    trace = traces.ranks[program.rank]
    work = work_frame(trace, opcodes)
    frame = pd.concat([trace.calls, work], axis=1)
    frame["opcode"] = opcodes
    frame["comm_size"] = np.nan
    frame["comm_nodes"] = np.nan
    return frame


def _with_layout(frame: pd.DataFrame, program: Program, replica: Replica, comms: list[GlobalComm]) -> pd.DataFrame:
    """The collective rows of `frame` with the replica's communicator sizes and node counts."""
    calls = [op.call for launch in program.launches for op in launch]
    groups = [comms[replica.comms[op.comm]] for launch in program.launches for op in launch]
    rows = frame.iloc[calls].copy()
    rows["comm_size"] = [len(g.members) for g in groups]
    rows["comm_nodes"] = [g.nodes for g in groups]
    return rows


def price(traces: TraceSet, replicas: list[Replica], comms: list[GlobalComm], provider: DurationProvider,
          hardware: Hardware) -> list[np.ndarray]:
    """Price each program (sets its `frame`, `device`, `host`) and return each replica's device times."""
    by_layout: dict[tuple, np.ndarray] = {}
    devices = []
    for replica in replicas:
        program = replica.program
        if program.frame is None:
            program.frame = priced_frame(program, traces)
        layout = (program.rank, tuple((len(comms[g].members), comms[g].nodes) if g >= 0 else None
                                      for g in replica.comms))
        if layout not in by_layout:
            coll = _with_layout(program.frame, program, replica, comms)
            if not len(program.device):  # the program's first layout: price everything
                frame = program.frame
                frame.loc[coll.index, ["comm_size", "comm_nodes"]] = coll[["comm_size", "comm_nodes"]].to_numpy()
                launch = getattr(provider, "launch_ns", None)
                program.price(provider.device_ns(frame, hardware), provider.host_ns(frame),
                              launch(frame) if launch is not None else None)
                by_layout[layout] = program.device
            else:
                device = program.device.copy()
                if len(coll):
                    device[coll.index.to_numpy()] = np.rint(np.maximum(provider.device_ns(coll, hardware), 0))
                by_layout[layout] = device
        devices.append(by_layout[layout])
    return devices
