"""Generates SPEC.md from `columns.TABLES`: `python -m maya_trace_spec.spec_doc > maya_trace_spec/SPEC.md`."""

from __future__ import annotations

from .columns import SPEC_VERSION, TABLES
from .writer import ROW_GROUP_ROWS

PREAMBLE = f"""# maya_trace_spec {SPEC_VERSION}

An open, versioned schema for device-API traces of deep-learning programs: what a program asked
of its GPUs (CUDA runtime and driver, cuBLAS/cuBLASLt, cuDNN, NCCL), in what order, on which
streams, under which framework op, and, when known, how long the device work took. Emulated
(Maya's virtual GPUs), measured (torch.profiler/Kineto imports, real-GPU profiling) and
predicted traces share it, so they can be joined call by call.

*This file is generated from `maya_trace_spec/columns.py`; do not edit it by hand.*

## Storage

- A **run** is a directory. `run.parquet` holds one row; every other table is hive-partitioned by
  rank: `TABLE/rank=N/part-XXXXX.parquet`, one or more parts per rank, read in part order. The
  `rank` column of per-rank tables lives in the directory name, not in the files.
- Parquet, zstd-compressed, row groups of {ROW_GROUP_ROWS:,} rows.
- Every file carries `maya_trace_spec.version` (semantic version) and `maya_trace_spec.table`
  in its key-value metadata.
- Files are written under a hidden temporary name, synced, and renamed into place: a file under
  a `part-*.parquet` name is always complete. Readers ignore other names.
- Times are int64 nanoseconds. `time_source` says whether a time was `emulated` (host clock of the
  emulator), `measured` (real GPU) or `predicted` (Maya's estimators).
- Names follow CUPTI/Kineto/Chakra where they overlap (given below where they differ).

## Versioning

- Minor versions add nullable columns, allowed values and `args` entries (1.1: `ops.phase`
  `eval`, `api_calls.domain` `nvml`; 1.2: `api_calls.args.triton`, a Triton launch's arguments; 1.3:
  `run.status` `interrupted`; 1.4: `api_calls.args.triton.name`, Inductor's own name of a kernel compiled under
  its placeholder `triton_`; 1.6: `api_calls.args.triton.args[].access`, whether a kernel reads or writes a tensor
  argument, and `api_calls.args.triton.dot`, whether its source calls `tl.dot`; 1.7: `api_calls.cpu_start_ns` and
  `api_calls.cpu_duration_ns`, the issuing thread's CPU time at a call's start and in it):
  readers fill a column missing from an older minor with nulls and ignore unknown columns and
  `args` entries of a newer minor.
- A minor may widen a value's meaning; readers give an older minor's files the new one (1.5:
  `api_calls.domain` `device` also marks the work a CUDA graph launch replays; a row of an older file whose
  `args` holds `cuda_graph_replay` is read with domain `device`).
- A file of an older major is upgraded by the registered migrations (`maya trace migrate` rewrites
  a run in place); a newer major, a missing or malformed version is rejected with an error naming
  the file.

## Querying

`maya sql "SELECT ..." --trace RUN_DIR` exposes every table below as a view of the same name.
"""


def render() -> str:
    out = [PREAMBLE]
    for t in TABLES.values():
        layout = "per rank (`rank=N/` partitions)" if t.per_rank else f"one file, `{t.name}.parquet`"
        out.append(f"## `{t.name}`\n\n{t.doc}\n\nStorage: {layout}.")
        if t.unique:
            out.append(f" Unique within a rank: `{', '.join(t.unique)}`.")
        out.append("\n\n| column | type | required | constraint | description |\n|---|---|---|---|---|\n")
        for c in t.columns:
            cons = []
            if c.minimum is not None:
                cons.append(f"≥ {c.minimum}")
            if c.allowed:
                cons.append("one of " + ", ".join(f"`{a}`" for a in c.allowed))
            doc = c.doc + (f" (CUPTI/Kineto: `{c.cuda_name}`)" if c.cuda_name else "")
            out.append(f"| `{c.name}` | `{c.type}` | {'yes' if not c.nullable else ''} | {'; '.join(cons)} | {doc} |\n")
        out.append("\n")
    return "".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
