"""The embedded DuckDB warehouse: a catalog of runs (and, later, profiles, estimators, predictions)."""
from __future__ import annotations

from pathlib import Path

import duckdb

from maya_trace_spec import Run, inspect_file, table_files

from .paths import warehouse_path

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
    con = duckdb.connect(str(path))
    con.execute(SCHEMA)
    return con


def register_run(run_dir: str | Path, path: str | Path | None = None) -> str:
    """Record a run in the catalog (idempotent: re-registering the same run updates its row)."""
    run = Run(run_dir)
    counts = {name: sum(_num_rows(run, name)) for name in ("api_calls", "ops")}
    info = run.info
    con = connect(path)
    try:
        con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, to_timestamp(? / 1e9), now())",
            [info["run_id"], str(run.path.resolve()), info["source"], info["status"], info["hardware"],
             info["world_size"], len(run.ranks), counts["api_calls"], counts["ops"], info["created_at_ns"]])
    finally:
        con.close()
    return info["run_id"]


def _num_rows(run: Run, name: str):
    return (inspect_file(p, name).num_rows for _, p in table_files(run.path, name))

