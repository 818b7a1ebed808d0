"""The embedded DuckDB warehouse: its openers (read-write, in one transaction, read-only), the lock they
wait for, and the catalog of runs. Every table's DDL and the migrations are in `warehouse_schema`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TypeVar

import duckdb

from maya_trace_spec import Run, inspect_file, table_files

from .paths import warehouse_path
from .warehouse_schema import TABLES, columns, create_table, pending

T = TypeVar("T")
LOCK_WAIT_S = 30.0
"""How long to wait for another process's lock on the warehouse file: DuckDB lets one process write
it or several read it, so writers hold it briefly and every opener waits its turn."""


def connect(path: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse for writing (default `$MAYA_WAREHOUSE`), creating it, its missing tables and
    running pending migrations (`upgrade`); waits while another process holds the file."""
    path = Path(path) if path else warehouse_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = wait_for_lock(lambda: duckdb.connect(str(path)))
    try:
        upgrade(con)
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def transaction(path: str | Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection (`connect`) inside one transaction: committed when the block ends, rolled
    back on any exception (nothing half-written), closed either way."""
    with closing(connect(path)) as con, atomic(con):
        yield con


@contextmanager
def atomic(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """`BEGIN` on `con`; `COMMIT` when the block ends, `ROLLBACK` on any exception (re-raised)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # DuckDB already ended it (a failed COMMIT rolls back)
            pass
        raise


def upgrade(con: duckdb.DuckDBPyConnection) -> None:
    """Create the tables `con`'s warehouse lacks and run its pending migrations, oldest first, in one
    transaction; an up-to-date warehouse is left untouched (nothing is written)."""
    missing, migrations = pending(con)
    if not missing and not migrations:
        return
    with atomic(con):
        for name in missing:
            con.execute(create_table(name))
        for m in migrations:
            con.execute(f"ALTER TABLE {m.table} ADD COLUMN {m.column} {m.definition}")
            for statement in m.backfill:
                con.execute(statement)


@contextmanager
def read_only(path: str | Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only view of the warehouse (default `$MAYA_WAREHOUSE`), closed when the block ends: a table
    the file lacks, or every table when there is no file, reads as an empty table with its columns
    (`warehouse_schema.TABLES`), so readers of a new warehouse see "nothing yet" rather than an error.
    Waits while another process writes the file; the file itself is never written or created."""
    path = Path(path) if path else warehouse_path()
    with closing(duckdb.connect(":memory:")) as con:
        if path.is_file():
            literal = "'" + str(path).replace("'", "''") + "'"
            wait_for_lock(lambda: con.execute(f"ATTACH {literal} AS warehouse (READ_ONLY)"))
            con.execute("USE warehouse")
        found = columns(con)
        for name in TABLES:
            if name not in found:
                con.execute(create_table(name, temporary=True))
        yield con


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


def insert_row(con: duckdb.DuckDBPyConnection, table: str, row: Mapping[str, object], *, replace: bool = False) -> None:
    """Insert one row into `table` by column name (`row`: column -> value), so a column added to the table
    can never shift the values; `replace` replaces the row with the same primary key."""
    if not row:
        raise ValueError(f"an empty row for table {table!r}")
    names = ", ".join(f'"{name}"' for name in row)
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    con.execute(f"{verb} INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def register_run(run_dir: str | Path, path: str | Path | None = None) -> str:
    """Record a run in the catalog (idempotent: re-registering the same run updates its row)."""
    run = Run(run_dir)
    counts = {name: sum(_num_rows(run, name)) for name in ("api_calls", "ops")}
    info = run.info
    with transaction(path) as con:
        con.execute(
            "INSERT OR REPLACE INTO runs (run_id, path, source, status, hardware, world_size, ranks, api_calls, ops, "
            "created_at, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, to_timestamp(? / 1e9), now())",
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
    return info["run_id"]


def _num_rows(run: Run, name: str):
    return (inspect_file(p, name).num_rows for _, p in table_files(run.path, name))
