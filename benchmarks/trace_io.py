"""Trace I/O throughput: write, read and DuckDB-aggregate N api_calls rows (default 10 million).

Targets on a 2-core machine: >= 5 M rows/s write, >= 20 M rows/s DuckDB scan. Each phase runs
`--repeat` times; the best and median wall rates are printed with the CPU time per row (all
threads) and the load average, since other work on the machine moves the wall figures.
Usage: python benchmarks/trace_io.py [--rows N] [--ranks R] [--repeat K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from maya_trace_spec import RunWriter, conform, read_table, synthetic
from maya_trace_spec.duck import register_run

WRITE_TARGET, SCAN_TARGET = 5e6, 20e6


def _timed(fn: Callable[[int], object], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process, all threads) of `fn(i)` for i in range(repeat)."""
    walls, cpus = [], []
    for i in range(repeat):
        c, t = time.process_time(), time.perf_counter()
        fn(i)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return walls, cpus


def _line(label: str, n: int, walls: list[float], cpus: list[float], note: str) -> str:
    best, med = n / min(walls), n / statistics.median(walls)
    return (
        f"{label:<5}  best {best / 1e6:6.1f}  median {med / 1e6:6.1f} M rows/s  "
        f"cpu {min(cpus) / n * 1e9:4.0f} ns/row  {note}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir))
    workers = os.cpu_count() or 1
    try:
        per_rank = args.rows // args.ranks
        tables = [conform("api_calls", synthetic.api_calls(per_rank, seed=r)) for r in range(args.ranks)]
        n = per_rank * args.ranks
        load = os.getloadavg()[0]

        def write(i: int) -> None:
            writer = RunWriter(base / f"run{i}")
            writer.write(
                "run",
                {
                    "run_id": ["bench"],
                    "created_at_ns": [0],
                    "source": ["synthetic"],
                    "status": ["complete"],
                    "world_size": [args.ranks],
                },
            )
            with ThreadPoolExecutor(workers) as pool:  # one writer per rank, as rank processes would
                list(pool.map(lambda r: writer.write("api_calls", tables[r], rank=r), range(args.ranks)))

        write_t = _timed(write, args.repeat)
        run = base / "run0"
        size = sum(f.stat().st_size for f in run.rglob("*.parquet"))
        tables.clear()  # free the source rows before reading them back

        def read(i: int) -> None:
            assert read_table(run, "api_calls").num_rows == n

        read_t = _timed(read, args.repeat)

        con = duckdb.connect()
        register_run(con, run)
        sql = "SELECT rank, api, count(*), sum(duration_ns), avg(grid_x * block_x) FROM api_calls GROUP BY ALL"
        con.execute(sql).fetchall()  # warm the OS cache as a repeated query would find it
        scan_t = _timed(lambda i: con.execute(sql).fetchall(), args.repeat)

        print(
            f"rows: {n:,} in {args.ranks} rank partitions ({workers} writer threads), "
            f"{size / 2**20:.0f} MiB on disk ({size / n:.1f} B/row, zstd); "
            f"load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end, {args.repeat} runs each"
        )
        print(_line("write", n, *write_t, f"target 5 M rows/s: best/target {n / min(write_t[0]) / WRITE_TARGET:.2f}"))
        print(_line("read", n, *read_t, "pyarrow, validated schema"))
        print(
            _line(
                "scan",
                n,
                *scan_t,
                f"target 20 M rows/s: best/target "
                f"{n / min(scan_t[0]) / SCAN_TARGET:.2f} (DuckDB GROUP BY over the views)",
            )
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
