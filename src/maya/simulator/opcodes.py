"""What each api_calls row means to the simulator: one opcode per call.

| opcode | calls | effect |
|---|---|---|
| `NOP` | everything else (stream creation, queries, ...) | host time only |
| `WORK` | kernel launches, GEMM/cuDNN executions, async copies and memsets, device rows | device work on the call's stream |
| `WORK_SYNC` | `cudaMemcpy`, device-to-host copies | device work, then the host waits for the stream |
| `RECORD` | `cudaEventRecord*` | the event's next version completes with the stream's work so far |
| `WAIT` | `cudaStreamWaitEvent` | the stream waits for the event's latest version |
| `EVENT_SYNC` / `STREAM_SYNC` / `DEVICE_SYNC` | `cudaEventSynchronize`, `cudaStreamSynchronize`, `cudaDeviceSynchronize` | the host waits |
| `COLL` | NCCL collectives and send/recv | device work released when every peer has arrived |
| `GROUP_START` / `GROUP_END` | `ncclGroupStart` / `ncclGroupEnd` | the collectives between them launch together |
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NOP, WORK, WORK_SYNC, RECORD, WAIT, EVENT_SYNC, STREAM_SYNC, DEVICE_SYNC, COLL, GROUP_START, GROUP_END = range(11)
NAMES = (
    "nop",
    "work",
    "work_sync",
    "record",
    "wait",
    "event_sync",
    "stream_sync",
    "device_sync",
    "coll",
    "group_start",
    "group_end",
)
DEVICE_OPS = (WORK, WORK_SYNC, COLL)
HOST_SYNC_OPS = (WORK_SYNC, EVENT_SYNC, STREAM_SYNC, DEVICE_SYNC)

BY_API: dict[str, int] = {
    **dict.fromkeys(("cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags"), RECORD),
    **dict.fromkeys(("cudaStreamWaitEvent", "cuStreamWaitEvent"), WAIT),
    **dict.fromkeys(("cudaEventSynchronize", "cuEventSynchronize"), EVENT_SYNC),
    **dict.fromkeys(("cudaStreamSynchronize", "cuStreamSynchronize"), STREAM_SYNC),
    **dict.fromkeys(("cudaDeviceSynchronize", "cuCtxSynchronize"), DEVICE_SYNC),
    **dict.fromkeys(
        (
            "cudaMemcpy",
            "cudaMemcpy2D",
            "cudaMemcpyToSymbol",
            "cudaMemcpyFromSymbol",
            "cuMemcpyDtoH",
            "cuMemcpyHtoD",
            "cuMemcpy",
        ),
        WORK_SYNC,
    ),
    **dict.fromkeys(
        (
            "cudaLaunchHostFunc",
            "cudaStreamAddCallback",
            "cuStreamWriteValue32",
            "cuStreamWriteValue64",
            "cudaGraphLaunch",
            "cuGraphLaunch",
            "cudaMemset",
            "kernel",
            "memcpy",
            "memset",
        ),
        WORK,
    ),
    "ncclGroupStart": GROUP_START,
    "ncclGroupEnd": GROUP_END,
}
"""Opcodes fixed by the API name alone."""


def classify(calls: pd.DataFrame) -> np.ndarray:
    """Opcode of every call (columns `api`, `domain`, `collective_name`, `kernel_id`, `gemm_m`, `bytes`,
    `memcpy_kind`, `device_duration_ns`). The API names' tests run once per distinct name (a trace has
    a few dozen in millions of calls)."""
    codes, names = pd.factorize(calls["api"].astype(str), use_na_sentinel=False)
    api = pd.Series(names)
    ops = np.full(len(calls), NOP, dtype=np.int8)
    copy_or_set = api.str.lower().str.contains("memcpy|memset", regex=True).to_numpy()[codes]
    work = (
        calls["kernel_id"].notna()
        | calls["gemm_m"].notna()
        | calls["device_duration_ns"].notna()
        | (calls["domain"] == "device")
    ).to_numpy() | (copy_or_set & calls["bytes"].notna().to_numpy())
    ops[work] = WORK
    host_copy = (calls["memcpy_kind"] == "DtoH") & (calls["domain"] != "device")  # a graph's copy node never blocks
    ops[copy_or_set & host_copy.to_numpy()] = WORK_SYNC
    named = api.map(BY_API).to_numpy(dtype="float64", na_value=np.nan)[codes]
    known = ~np.isnan(named)
    ops[known] = named[known].astype(np.int8)
    ops[calls["collective_name"].notna().to_numpy()] = COLL
    return ops
