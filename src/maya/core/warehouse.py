"""The embedded DuckDB warehouse: a catalog of runs (and, later, profiles, estimators, predictions)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb

from maya_trace_spec import Run, inspect_file, table_files

from .paths import warehouse_path

T = TypeVar("T")
LOCK_WAIT_S = 30.0
"""How long to wait for another process's lock on the warehouse file: DuckDB lets one process write
it or several read it, so writers hold it briefly and every opener waits its turn."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id        VARCHAR PRIMARY KEY,
    path          VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,
    status        VARCHAR NOT NULL,
    hardware      VARCHAR,
    world_size    INTEGER NOT NULL,
    ranks         INTEGER NOT NULL,
    api_calls     BIGINT NOT NULL,
    ops           BIGINT NOT NULL,
    created_at    TIMESTAMP,
    registered_at TIMESTAMP NOT NULL
);
"""


def connect(path: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for writing, creating it and its tables if needed."""
    path = Path(path) if path else warehouse_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = wait_for_lock(lambda: duckdb.connect(str(path)))
    con.execute(SCHEMA)
    return con


def wait_for_lock(attempt: Callable[[], T], timeout_s: float = LOCK_WAIT_S) -> T:
    """`attempt()`, retried while another process holds a conflicting lock on the warehouse file."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            return attempt()
        except duckdb.IOException as e:
            if "Could not set lock" not in str(e) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.2)


def register_run(run_dir: str | Path, path: str | Path | None = None) -> str:
    """Record a run in the catalog (idempotent: re-registering the same run updates its row)."""
    run = Run(run_dir)
    counts = {name: sum(_num_rows(run, name)) for name in ("api_calls", "ops")}
    info = run.info
    con = connect(path)
    try:
        con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, to_timestamp(? / 1e9), now())",
            [
                info["run_id"],
                str(run.path.resolve()),
                info["source"],
                info["status"],
                info["hardware"],
                info["world_size"],
                len(run.ranks),
                counts["api_calls"],
                counts["ops"],
                info["created_at_ns"],
            ],
        )
    finally:
        con.close()
    return info["run_id"]


def _num_rows(run: Run, name: str):
    return (inspect_file(p, name).num_rows for _, p in table_files(run.path, name))
