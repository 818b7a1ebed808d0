"""Ground-truth results of workload runs: one row per config, each in its own Parquet file.

    DIR/results/<name>.parquet   one row (SCHEMA): the config, where and how it ran, iteration times,
                                 memory peaks, out-of-memory, status
    DIR/traces/<name>/           maya_trace_spec run of the profiled iterations (torch.profiler)
    DIR/logs/<name>.log          the script's output (suite runs)

A results file is written atomically and never overwritten: it is the config's commit record, so a
config with one is done (delete it to measure again) and a trace without one is an orphan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from maya_trace_spec.writer import atomic_write

RESULTS_VERSION = "1"
VERSION_KEY = b"maya.workload_results.version"
STATUSES = ("ok", "oom", "error", "timeout")
"""`ok`: every measured iteration and the trace; `oom`: the script raised torch.OutOfMemoryError;
`error`: another exception, a crash, or too few iterations; `timeout`: killed at the config's time limit."""

_i32, _i64, _f64, _s, _b = pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.bool_()
SCHEMA = pa.schema(
    [
        ("name", _s),
        ("workload", _s),
        ("config", _s),
        ("status", _s),
        ("error", _s),
        ("hardware", _s),
        ("device_name", _s),
        ("driver_version", _s),
        ("cuda_version", _s),
        ("torch_version", _s),
        ("cudnn_version", _s),
        ("versions", _s),
        ("clocks_start", _s),
        ("clocks_end", _s),
        ("timing_source", _s),
        ("iterations_by", _s),
        ("warmup_iterations", _i32),
        ("measured_iterations", _i32),
        ("iteration_ns", pa.list_(_i64)),
        ("host_iteration_ns", pa.list_(_i64)),
        ("median_ns", _i64),
        ("p10_ns", _i64),
        ("p90_ns", _i64),
        ("mean_ns", _i64),
        ("host_median_ns", _i64),
        ("max_memory_allocated_bytes", _i64),
        ("max_memory_reserved_bytes", _i64),
        ("oom", _b),
        ("oom_requested_bytes", _i64),
        ("trace_path", _s),
        ("trace_iterations", pa.list_(_i32)),
        ("started_at_ns", _i64),
        ("wall_s", _f64),
    ],
    metadata={VERSION_KEY: RESULTS_VERSION.encode()},
)
"""`config`: JSON of the script, its args, warm-up and measured iterations, what marks iterations and
any suite attributes; `iteration_ns`: the measured iterations' durations, from CUDA events on CUDA
(`timing_source` `cuda_events`) or the wall clock elsewhere (`wall_clock`), and `median_ns`, `p10_ns`,
`p90_ns`, `mean_ns` of them (status `ok` only); `host_iteration_ns`: their host wall-clock durations;
memory peaks: `torch.cuda.max_memory_allocated/reserved` after the measured iterations (at the
error for `oom`); `versions`, `clocks_*`: JSON (nvidia-smi clocks before and after); `trace_path`:
the trace run relative to DIR, holding iterations `trace_iterations` (0-based, as `ops.iteration`)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"config name {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


def result_path(root: str | Path, name: str) -> Path:
    return Path(root) / "results" / f"{check_name(name)}.parquet"


def is_done(root: str | Path, name: str) -> bool:
    return result_path(root, name).exists()


def done_names(root: str | Path) -> set[str]:
    directory = Path(root) / "results"
    return {p.stem for p in directory.glob("*.parquet")} if directory.is_dir() else set()


def workload_name(argv: Sequence[str]) -> str:
    """The script's name without its suffix, or the module's (`-m MODULE ARGS`)."""
    return argv[1] if argv[0] == "-m" else Path(argv[0]).stem


def config_columns(name: str, argv: Sequence[str], settings: dict) -> dict:
    """The columns that say what ran: name, workload, config JSON (script, args and `settings`)."""
    script = list(argv[:2]) if argv[0] == "-m" else [argv[0]]
    config = {"script": " ".join(script), "args": list(argv[len(script) :]), **settings}
    return {"name": check_name(name), "workload": workload_name(argv), "config": json.dumps(config)}


def write_result(root: str | Path, row: dict) -> Path:
    """Write the row of config `row["name"]`; FileExistsError if that config already has one."""
    return atomic_write(pa.Table.from_pylist([row], schema=SCHEMA), result_path(root, row["name"]), replace=False)


def read_result(root: str | Path, name: str) -> dict:
    return pq.read_table(result_path(root, name), schema=SCHEMA).to_pylist()[0]


def read_results(root: str | Path) -> pa.Table:
    """Every results row under `root`, by name."""
    rows = [read_result(root, name) for name in sorted(done_names(root))]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def summary(row: dict) -> str:
    """One line: the config's status, iteration times and memory peak."""
    text = f"{row['name']}: {row['status']}"
    if row["median_ns"] is not None:
        text += (
            f", median {row['median_ns'] / 1e6:.2f} ms (p10 {row['p10_ns'] / 1e6:.2f}, "
            f"p90 {row['p90_ns'] / 1e6:.2f}) over {row['measured_iterations']} iterations "
            f"({row['timing_source']})"
        )
    if row["max_memory_allocated_bytes"] is not None:
        text += f", peak allocated {row['max_memory_allocated_bytes'] / 2**30:.2f} GiB"
    if row["oom_requested_bytes"] is not None:
        text += f", out of memory asking for {row['oom_requested_bytes'] / 2**30:.2f} GiB"
    if row["status"] not in ("ok", "oom") and row["error"]:
        text += f": {row['error'].strip().splitlines()[-1][:300]}"
    return text
