"""Trace I/O throughput: write, read and DuckDB-aggregate N api_calls rows (default 10 million).

Targets on a 2-core machine: >= 5 M rows/s write, >= 20 M rows/s DuckDB scan.
Usage: python benchmarks/trace_io.py [--rows N] [--ranks R] [--dir DIR]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from maya_trace_spec import RunWriter, conform, read_table, synthetic
from maya_trace_spec.duck import register_run

WRITE_TARGET, SCAN_TARGET = 5e6, 20e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--dir", type=Path, default=None)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir))
    run = base / "run"
    try:
        per_rank = args.rows // args.ranks
        tables = [conform("api_calls", synthetic.api_calls(per_rank, seed=r)) for r in range(args.ranks)]
        n = per_rank * args.ranks
        writer = RunWriter(run)
        writer.write("run", {"run_id": ["bench"], "created_at_ns": [0], "source": ["synthetic"],
                             "status": ["complete"], "world_size": [args.ranks]})

        t = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:  # one writer per rank, as rank processes would
            list(pool.map(lambda r: writer.write("api_calls", tables[r], rank=r), range(args.ranks)))
        write_s = time.perf_counter() - t
        size = sum(f.stat().st_size for f in run.rglob("*.parquet"))

        t = time.perf_counter()
        rows = read_table(run, "api_calls").num_rows
        read_s = time.perf_counter() - t
        assert rows == n

        con = duckdb.connect()
        register_run(con, run)
        sql = ("SELECT rank, api, count(*), sum(duration_ns), avg(grid_x * block_x) FROM api_calls "
               "GROUP BY ALL")
        con.execute(sql).fetchall()  # warm the OS cache as a repeated query would find it
        t = time.perf_counter()
        con.execute(sql).fetchall()
        scan_s = time.perf_counter() - t

        print(f"rows: {n:,} in {args.ranks} rank partitions, {size / 2**20:.0f} MiB on disk "
              f"({size / n:.1f} B/row, zstd)")
        print(f"write  {n / write_s / 1e6:7.1f} M rows/s  ({write_s:.2f} s)  target 5 M rows/s: "
              f"ratio {n / write_s / WRITE_TARGET:.2f}")
        print(f"read   {n / read_s / 1e6:7.1f} M rows/s  ({read_s:.2f} s)  pyarrow, validated schema")
        print(f"scan   {n / scan_s / 1e6:7.1f} M rows/s  ({scan_s:.2f} s)  target 20 M rows/s: "
              f"ratio {n / scan_s / SCAN_TARGET:.2f}  (DuckDB GROUP BY over the views)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
