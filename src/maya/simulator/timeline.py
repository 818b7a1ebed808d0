"""The simulated schedule as Chrome/Perfetto trace JSON: one process per rank, one track for the host
thread (its calls, and `wait` slices while it is blocked) and one per stream (kernels, copies,
collectives from arrival to release). Times in microseconds from the start of the replay."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .engine import RankResult
from .opcodes import COLL, WORK, WORK_SYNC
from .program import Program
from .topology import Replica
from .trace import TraceSet

HOST_TID = 0


def call_labels(program: Program, traces: TraceSet) -> np.ndarray:
    """A display name per call: kernel name, GEMM shape, attention op, copy kind, else the API."""
    frame = program.frame
    kernels = traces.ranks[program.rank].kernels
    names = dict(zip(kernels["kernel_id"], kernels["demangled"].fillna(kernels["name"]))) if len(kernels) else {}
    labels = frame["api"].astype(str).to_numpy(dtype=object)
    kernel = frame["kernel_id"].map(names)
    labels = np.where(kernel.notna(), kernel.astype(str).str.slice(0, 120), labels)
    family = frame["family"].to_numpy(dtype=object)
    gemm = family == "gemm"
    shape = (
        "gemm "
        + frame["m"].astype("Int64").astype(str)
        + "x"
        + frame["n"].astype("Int64").astype(str)
        + "x"
        + frame["k"].astype("Int64").astype(str)
        + " "
        + frame["dtype"].astype(str)
    )
    labels = np.where(gemm & frame["m"].notna().to_numpy(), shape, labels)  # a GEMM with no shape keeps its name
    labels = np.where(family == "attention", frame["op"].astype(str), labels)
    copy = family == "copy"
    labels = np.where(copy, np.where(frame["op"] == "memset", "memset", "memcpy " + frame["op"].astype(str)), labels)
    return labels


def _events(replica: Replica, result: RankResult, device: np.ndarray, labels: np.ndarray) -> Iterator[dict]:
    p, pid = replica.program, replica.rank
    role = "" if replica.captured else f" (replays rank {p.rank})"
    yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"rank {pid}{role}"}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": HOST_TID, "args": {"name": "host"}}
    used = np.unique(p.stream[np.isin(p.opcodes, (WORK, WORK_SYNC, COLL))])
    for s in used.tolist():
        yield {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": 1 + s,
            "args": {"name": f"stream {p.stream_ids[s]}"},
        }
    api = p.frame["api"].to_numpy(dtype=object)
    for i in np.flatnonzero(p.host > 0):
        yield {
            "ph": "X",
            "cat": "host",
            "name": api[i],
            "pid": pid,
            "tid": HOST_TID,
            "ts": (result.issue[i] - p.host[i]) / 1e3,
            "dur": p.host[i] / 1e3,
        }
    for i in np.flatnonzero(result.wait > 0):
        yield {
            "ph": "X",
            "cat": "wait",
            "name": f"wait ({api[i]})",
            "pid": pid,
            "tid": HOST_TID,
            "ts": result.issue[i] / 1e3,
            "dur": result.wait[i] / 1e3,
        }
    for i in np.flatnonzero(np.isin(p.opcodes, (WORK, WORK_SYNC))):
        yield {
            "ph": "X",
            "cat": "device",
            "name": labels[i],
            "pid": pid,
            "tid": 1 + int(p.stream[i]),
            "ts": (result.end[i] - device[i]) / 1e3,
            "dur": device[i] / 1e3,
            "args": {"seq": int(i)},
        }
    collective = p.frame["collective"].to_numpy(dtype=object)
    comm_id = p.frame["comm_id"].to_numpy(dtype=object)
    for L, (launch, call) in enumerate(zip(p.launches, p.launch_call)):
        name = "+".join(str(collective[op.call]) for op in launch)
        yield {
            "ph": "X",
            "cat": "collective",
            "name": name,
            "pid": pid,
            "tid": 1 + int(p.stream[call]),
            "ts": result.launch_start[L] / 1e3,
            "dur": (result.launch_end[L] - result.launch_start[L]) / 1e3,
            "args": {"comm": sorted({str(comm_id[op.call]) for op in launch}), "seq": int(call)},
        }


def write_timeline(
    path: str | Path,
    replicas: list[Replica],
    results: list[RankResult],
    devices: list[np.ndarray],
    traces: TraceSet,
    *,
    ranks: set[int] | None = None,
) -> int:
    """Write the timeline of `ranks` (default: every simulated rank) atomically; returns the event count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    labels: dict[int, np.ndarray] = {}
    count = 0
    try:
        with open(tmp, "w") as fh:
            fh.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
            for replica, result, device in zip(replicas, results, devices):
                if ranks is not None and replica.rank not in ranks:
                    continue
                p = replica.program
                if p.rank not in labels:
                    labels[p.rank] = call_labels(p, traces)
                for event in _events(replica, result, device, labels[p.rank]):
                    fh.write(("" if count == 0 else ",\n") + json.dumps(event, default=_plain))
                    count += 1
            fh.write("\n]}\n")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return count


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if value is pd.NA:
        return None
    raise TypeError(type(value).__name__)
