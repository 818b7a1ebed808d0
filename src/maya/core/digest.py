"""Content digests: of traces (two captures of the same program digest alike, whatever their timings) and of the
source and data files a cache key depends on."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

VOLATILE = {
    "start_ns",
    "end_ns",
    "duration_ns",
    "device_start_ns",
    "device_duration_ns",
    "cpu_start_ns",
    "cpu_duration_ns",
    "time_source",
    "thread_id",
    "args",
    "event_id",
}
"""Columns that change between two captures of the same program (times, the issuing thread's CPU clock, thread ids,
pointers)."""


def trace_digest(run_dir: str | Path) -> str:
    """Content hash of a run's api_calls and ops (times, thread ids and pointers left out), its
    capture status and which ranks each capture represents: equal digests predict the same."""
    import pyarrow as pa

    from maya_trace_spec import read_table

    h = hashlib.sha256()
    for name in ("run", "api_calls", "ops", "devices"):
        table = read_table(run_dir, name).combine_chunks()
        keep = [c for c in table.column_names if c not in VOLATILE | {"hostname", "pid"}]
        if name == "run":
            keep = ["status", "hardware", "world_size", "nnodes", "nproc_per_node"]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.select(keep).schema) as writer:
            writer.write_table(table.select(keep))
        h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()[:16]


def files_digest(salt: str, files: Iterable[tuple[Path, Path]]) -> str:
    """Of `salt` and each `(file, base)`'s path relative to `base` and contents, in the given order (files that do not
    exist are skipped): equal digests, equal files."""
    h = hashlib.sha256(salt.encode())
    for path, base in files:
        if path.is_file():
            h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
