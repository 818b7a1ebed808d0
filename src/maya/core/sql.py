"""Read-only DuckDB SQL over the warehouse and, optionally, a run's tables (`maya sql`).

Two independent guards keep it read-only:
1. only SELECT-like statements (SELECT, SHOW, DESCRIBE, SUMMARIZE, EXPLAIN without ANALYZE) are
   accepted; every other statement type (INSERT, COPY, ATTACH, INSTALL/LOAD, CREATE, SET, ...)
   is refused before anything runs;
2. the session itself is sandboxed: the warehouse is attached READ_ONLY, file access is limited to
   Maya's data directories, external access is off and the configuration is locked.

While a pipeline process is writing the warehouse, attaching it waits for the write to finish.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from maya_trace_spec.duck import register_run

from .paths import data_dir, maya_home, warehouse_path
from .warehouse import wait_for_lock

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
_EXPLAIN_ANALYZE = re.compile(r"^\s*explain\s+analy[sz]e\b", re.IGNORECASE)


class QueryRefused(Exception):
    """A statement that `maya sql` will not run, with the reason."""


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]


def check_read_only(sql: str) -> None:
    """Raise `QueryRefused` unless every statement in `sql` only reads."""
    try:
        statements = duckdb.connect().extract_statements(sql)
    except duckdb.Error as e:
        raise QueryRefused(f"SQL does not parse: {e}") from None
    if not statements:
        raise QueryRefused("no SQL statement given")
    for st in statements:
        if st.type not in ALLOWED:
            kind = "INSTALL/LOAD" if st.type == duckdb.StatementType.LOAD else st.type.name.replace("_", " ")
            raise QueryRefused(f"maya sql is read-only: {kind} statements are refused "
                               f"({st.query.strip()[:60]!r})")
        if _EXPLAIN_ANALYZE.match(st.query):
            raise QueryRefused("maya sql is read-only: EXPLAIN ANALYZE executes its statement and is refused")


def open_session(trace: str | Path | None = None, warehouse: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session with the warehouse attached read-only and the run's views."""
    con = duckdb.connect(":memory:")
    wh = Path(warehouse) if warehouse else warehouse_path()
    if wh.exists():
        try:
            wait_for_lock(lambda: con.execute(f"ATTACH {_lit(str(wh))} AS warehouse (READ_ONLY)"))
        except duckdb.Error as e:
            raise QueryRefused(f"cannot open the warehouse {wh} read-only: {e}") from None
    allowed = [data_dir(), maya_home()]
    if trace is not None:
        register_run(con, trace)
        allowed.append(Path(trace))
    if wh.exists():
        con.execute("USE warehouse")
    dirs = ", ".join(_lit(str(Path(d).resolve()) + "/") for d in allowed)
    con.execute(f"SET allowed_directories = [{dirs}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(sql: str, trace: str | Path | None = None, warehouse: str | Path | None = None) -> Result:
    """Run read-only `sql`; the result of the last statement is returned."""
    check_read_only(sql)
    con = open_session(trace, warehouse)
    try:
        rel = None
        for st in con.extract_statements(sql):
            rel = con.execute(st)
        return Result([d[0] for d in rel.description], rel.fetchall())
    except duckdb.PermissionException as e:
        raise QueryRefused(f"maya sql only reads Maya's data directories: {_first_line(e)}") from None
    finally:
        con.close()


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
