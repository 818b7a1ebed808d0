"""Export a run to Chrome Trace Event JSON, for the Perfetto UI (ui.perfetto.dev) and chrome://tracing.

The file is the object form ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``
(``otherData`` holds the `run` row). Each rank is one process (``pid`` = rank, named
``"rank N (device name)"``), holding:

* host threads (``tid`` = ``thread_id``, 0 when null): every ``api_calls`` row as a complete
  event (``"ph": "X"``, category ``api``) and every ``ops`` row as an ``"X"`` event (category ``op``)
  on its thread, so ops enclose the ops and calls they contain;
* device tracks, one per stream (``tid`` = ``STREAM_TID_BASE + stream_id``, a null stream being the
  legacy default stream 0), named ``"stream N"`` and sorted after the host threads: the device
  interval of every ``api_calls`` row with a ``device_start_ns`` (category ``device``), named after
  its kernel (``kernels.demangled``, else ``kernels.name``) or else its api, with launch, GEMM, copy
  and collective columns in ``args`` where not null;
* a flow arrow (``"s"``/``"f"``, ``"bp": "e"``) from each host call to its device interval, except for
  rows of domain ``device`` (device work without a host call);
* a counter track ``memory`` (series ``allocated_bytes``) from ``memory_events``.

Number of ``"X"`` events = rows of ``api_calls`` + rows of ``api_calls`` with a non-null
``device_start_ns`` + rows of ``ops``. Emulated traces carry no device times, so they have host
tracks only.

Chrome JSON times are microseconds: ``ts`` and ``dur`` are written as exact decimals with three
fractional digits (nanoseconds), on the trace's own clock (not rebased). A viewer that parses them as
doubles keeps nanosecond precision while timestamps stay below 2**53 ns (about 104 days).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..columns import SPEC_VERSION
from ..reader import Run
from ..writer import atomic_path

STREAM_TID_BASE = 1_000_000_000
"""Device track of stream ``s`` has ``tid = STREAM_TID_BASE + s`` (clear of real OS thread ids)."""

BATCH_ROWS = 64 * 1024
"""Rows converted to Python objects at a time."""

_API_COLUMNS = (
    "seq",
    "thread_id",
    "api",
    "domain",
    "status",
    "start_ns",
    "duration_ns",
    "time_source",
    "correlation_id",
    "op_id",
    "device",
    "stream_id",
    "device_start_ns",
    "device_duration_ns",
    "kernel_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "shared_mem_bytes",
    "registers_per_thread",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gemm_batch",
    "gemm_trans_a",
    "gemm_trans_b",
    "gemm_dtype_a",
    "gemm_dtype_b",
    "gemm_dtype_c",
    "gemm_compute_type",
    "bytes",
    "memcpy_kind",
    "comm_id",
    "collective_name",
    "in_msg_nelems",
    "out_msg_nelems",
    "comm_dtype",
    "root_rank",
    "peer_rank",
    "comm_seq",
    "event_id",
    "data_dependent",
    "args",
)
_HOST_ARGS = (
    "seq",
    "domain",
    "status",
    "time_source",
    "correlation_id",
    "op_id",
    "device",
    "stream_id",
    "kernel_id",
    "event_id",
    "data_dependent",
    "args",
)
_DEVICE_ARGS = (
    "seq",
    "correlation_id",
    "kernel_id",
    "shared_mem_bytes",
    "registers_per_thread",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gemm_batch",
    "gemm_trans_a",
    "gemm_trans_b",
    "gemm_dtype_a",
    "gemm_dtype_b",
    "gemm_dtype_c",
    "gemm_compute_type",
    "bytes",
    "memcpy_kind",
    "comm_id",
    "collective_name",
    "in_msg_nelems",
    "out_msg_nelems",
    "comm_dtype",
    "root_rank",
    "peer_rank",
    "comm_seq",
)
_OP_COLUMNS = (
    "op_id",
    "parent_op_id",
    "name",
    "thread_id",
    "start_ns",
    "end_ns",
    "time_source",
    "input_shapes",
    "input_dtypes",
    "module_path",
    "phase",
    "iteration",
    "seq_nr",
)
_OP_ARGS = (
    "op_id",
    "parent_op_id",
    "time_source",
    "input_shapes",
    "input_dtypes",
    "module_path",
    "phase",
    "iteration",
    "seq_nr",
)

_json = json.JSONEncoder(separators=(",", ":")).encode


@dataclass
class ExportStats:
    """What `export_perfetto` wrote."""

    api_slices: int = 0
    device_slices: int = 0
    op_slices: int = 0
    counters: int = 0
    flows: int = 0

    @property
    def slices(self) -> int:
        """All ``"X"`` events."""
        return self.api_slices + self.device_slices + self.op_slices


def export_perfetto(run_dir: str | Path, out_file: str | Path) -> ExportStats:
    """Write the run at `run_dir` as Chrome Trace Event JSON to `out_file` (atomically)."""
    run = Run(run_dir)
    with atomic_path(Path(out_file)) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        return _write(run, fh)


def _write(run: Run, fh: IO[str]) -> ExportStats:
    other = _json({"maya_trace_spec": SPEC_VERSION, **run.info})
    fh.write(f'{{"displayTimeUnit":"ns","otherData":{other},"traceEvents":[\n')
    stats = ExportStats()
    first = True
    for event in _events(run, stats):
        if not first:
            fh.write(",\n")
        fh.write(event)
        first = False
    fh.write("\n]}\n")
    return stats


def _events(run: Run, stats: ExportStats) -> Iterator[str]:
    """Every trace event of the run, as JSON text, counting them in `stats`."""
    devices = {d["rank"]: d for d in run.table("devices").to_pylist()}
    for rank in run.ranks:
        device_name = devices.get(rank, {}).get("device_name")
        label = f"rank {rank}" + (f" ({device_name})" if device_name else "")
        yield _meta(rank, 0, "process_name", {"name": label})
        yield _meta(rank, 0, "process_sort_index", {"sort_index": rank})
        kernels = {
            k["kernel_id"]: k["demangled"] or k["name"]
            for k in run.table("kernels", [rank]).select(["kernel_id", "name", "demangled"]).to_pylist()
        }
        tracks: set[int] = set()

        def track(tid: int, name: str) -> Iterator[str]:
            if tid not in tracks:
                tracks.add(tid)
                yield _meta(rank, tid, "thread_name", {"name": name})
                yield _meta(rank, tid, "thread_sort_index", {"sort_index": tid})

        for r in _rows(run, "api_calls", rank, _API_COLUMNS):
            tid = r["thread_id"] if r["thread_id"] is not None else 0
            yield from track(tid, f"thread {tid}")
            yield _slice(
                rank,
                tid,
                r["start_ns"],
                r["duration_ns"],
                "api",
                r["api"],
                {c: r[c] for c in _HOST_ARGS if r[c] is not None},
            )
            stats.api_slices += 1
            if r["device_start_ns"] is None:
                continue
            stream = r["stream_id"] if r["stream_id"] is not None else 0
            dtid = STREAM_TID_BASE + stream
            yield from track(dtid, f"stream {stream}")
            args = {"stream": stream}
            if r["grid_x"] is not None:
                args["grid"] = [r["grid_x"], r["grid_y"], r["grid_z"]]
            if r["block_x"] is not None:
                args["block"] = [r["block_x"], r["block_y"], r["block_z"]]
            args.update((c, r[c]) for c in _DEVICE_ARGS if r[c] is not None)
            name = kernels.get(r["kernel_id"]) or r["api"]
            yield _slice(rank, dtid, r["device_start_ns"], r["device_duration_ns"], "device", name, args)
            stats.device_slices += 1
            if r["domain"] != "device":
                stats.flows += 1
                flow = f'"id":{stats.flows},"cat":"launch","name":"launch"'
                yield f'{{"ph":"s","pid":{rank},"tid":{tid},"ts":{_us(r["start_ns"])},{flow}}}'
                yield (f'{{"ph":"f","bp":"e","pid":{rank},"tid":{dtid},"ts":{_us(r["device_start_ns"])},{flow}}}')

        for r in _rows(run, "ops", rank, _OP_COLUMNS):
            tid = r["thread_id"] if r["thread_id"] is not None else 0
            yield from track(tid, f"thread {tid}")
            dur = None if r["end_ns"] is None else max(0, r["end_ns"] - r["start_ns"])
            yield _slice(
                rank, tid, r["start_ns"], dur, "op", r["name"], {c: r[c] for c in _OP_ARGS if r[c] is not None}
            )
            stats.op_slices += 1

        for r in _rows(run, "memory_events", rank, ("ts_ns", "allocated_bytes")):
            if r["allocated_bytes"] is not None:
                yield (
                    f'{{"ph":"C","pid":{rank},"tid":0,"ts":{_us(r["ts_ns"])},"name":"memory",'
                    f'"args":{{"allocated_bytes":{r["allocated_bytes"]}}}}}'
                )
                stats.counters += 1


def _rows(run: Run, table: str, rank: int, columns: tuple[str, ...]) -> Iterator[dict]:
    """Rows of one rank's table as dicts, converted `BATCH_ROWS` at a time."""
    for batch in run.table(table, [rank]).select(list(columns)).to_batches(BATCH_ROWS):
        yield from batch.to_pylist()


def _us(ns: int) -> str:
    """Nanoseconds as exact decimal microseconds."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def _slice(pid: int, tid: int, ts_ns: int, dur_ns: int | None, cat: str, name: str, args: dict) -> str:
    return (
        f'{{"ph":"X","pid":{pid},"tid":{tid},"ts":{_us(ts_ns)},"dur":{_us(dur_ns or 0)},'
        f'"cat":"{cat}","name":{_json(name)},"args":{_json(args)}}}'
    )


def _meta(pid: int, tid: int, name: str, args: dict) -> str:
    return f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"{name}","args":{_json(args)}}}'
