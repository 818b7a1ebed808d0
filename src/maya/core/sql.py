"""Read-only DuckDB SQL over the warehouse and, optionally, a run's tables (`maya sql`).

Two independent guards keep it read-only:
1. only SELECT-like statements (SELECT, SHOW, DESCRIBE, SUMMARIZE, EXPLAIN of one of them, without ANALYZE)
   are accepted; every other statement type (INSERT, COPY, ATTACH, INSTALL/LOAD, CREATE, SET, ...) is
   refused before anything runs;
2. the session itself is sandboxed: the warehouse is attached READ_ONLY, file access is limited to
   Maya's data directories, external access is off, nothing spills to disk and the configuration is locked.

Two limits keep a query from exhausting the machine: `MAYA_SQL_TIMEOUT` seconds of wall time (default 300;
0: none) and `MAYA_SQL_MEMORY` (default half the physical memory, e.g. `8GB`), which bounds DuckDB's buffers
and, while the query runs, this process's data segment (Linux `RLIMIT_DATA`), so that allocations DuckDB
does not account for (a list of a billion elements) fail instead of the process being killed.

Errors: `QueryRefused` (a statement that would write or reach outside Maya's directories: nothing ran),
`QueryLimit` (past the time or memory limit), `QueryError` (the SQL failed: syntax, unknown names, ...);
the first two are `QueryError`s.

While a pipeline process is writing the warehouse, attaching it waits for the write to finish.
"""

from __future__ import annotations

import os
import pickle
import re
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from maya_trace_spec.duck import register_run

from . import settings
from .paths import data_dir, maya_home, warehouse_path
from .warehouse import wait_for_lock

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
DEFAULT_TIMEOUT_S = 300.0
_SIZE = re.compile(r"^\s*([0-9.]+)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)


class QueryError(Exception):
    """A query that failed, with DuckDB's reason."""


class QueryRefused(QueryError):
    """A statement that `maya sql` will not run, with the reason."""


class QueryLimit(QueryError):
    """A query that ran past the time or memory limit."""


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]


def check_read_only(sql: str) -> None:
    """Raise `QueryRefused` unless every statement in `sql` only reads."""
    statements = _statements(sql)
    if not statements:
        raise QueryRefused("no SQL statement given")
    for st in statements:
        _check_statement(st)


def _statements(sql: str) -> list:
    """The statements of `sql`, parsed by a connection closed at once (no DuckDB threads outlive it)."""
    con = duckdb.connect()
    try:
        return con.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryRefused(f"SQL does not parse: {_first_line(e)}") from None
    finally:
        con.close()


def _check_statement(st) -> None:
    try:
        statement_type = st.type
    except ValueError:  # a type DuckDB's Python API has no name for (UPDATE EXTENSIONS)
        raise QueryRefused(f"maya sql is read-only: {st.query.strip()[:60]!r} is refused (not a query)") from None
    if statement_type not in ALLOWED:
        kind = "INSTALL/LOAD" if statement_type == duckdb.StatementType.LOAD else statement_type.name.replace("_", " ")
        raise QueryRefused(f"maya sql is read-only: {kind} statements are refused ({st.query.strip()[:60]!r})")
    if statement_type == duckdb.StatementType.EXPLAIN:
        _check_explain(st.query)


def _check_explain(query: str) -> None:
    """EXPLAIN ANALYZE executes its statement (in any spelling: comments, `(ANALYZE)` options), and the
    statement explained must itself only read."""
    every = duckdb.tokenize(query)
    ends = [start for start, _ in every[1:]] + [len(query)]
    tokens = [
        (start, query[start:end].strip())
        for (start, kind), end in zip(every, ends)
        if kind != duckdb.token_type.comment
    ]
    words = [text.lower() for _, text in tokens]
    if any(w in ("analyze", "analyse") for w in words):
        raise QueryRefused("maya sql is read-only: EXPLAIN ANALYZE executes its statement and is refused")
    i = 1  # after EXPLAIN: an optional parenthesised option list
    if i < len(words) and words[i] == "(":
        depth = 0
        while i < len(words):
            depth += words[i] == "("
            depth -= words[i] == ")"
            i += 1
            if depth == 0:
                break
    if i >= len(tokens):
        raise QueryRefused("EXPLAIN of nothing")
    for st in _statements(query[tokens[i][0] :]):
        _check_statement(st)


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
    con.execute("SET temp_directory = ''")  # nothing spills to disk (and no temporary directory is allowed)
    con.execute(f"SET memory_limit = '{memory_limit()}B'")
    con.execute(f"SET allowed_directories = [{dirs}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(
    sql: str, trace: str | Path | None = None, warehouse: str | Path | None = None, *, timeout_s: float | None = None
) -> Result:
    """Run read-only `sql`; the result of the last statement is returned. `timeout_s` defaults to
    `$MAYA_SQL_TIMEOUT`. Raises `QueryRefused`, `QueryLimit` or `QueryError` (see the module), and
    `maya_trace_spec.TraceError` for a trace that cannot be read.

    The statements run in a forked process (where `os.fork` exists): past the time limit (and a grace of
    `GRACE_S` for DuckDB to stop) it is killed, so no statement can hang or take this process's memory
    with it — DuckDB does not stop everything on an interrupt (planning `EXPLAIN SELECT repeat('x', 10^8)`)."""
    check_read_only(sql)
    timeout_s = _timeout() if timeout_s is None else timeout_s
    limit = memory_limit()
    if not hasattr(os, "fork"):
        return _execute(sql, trace, warehouse, timeout_s, limit)
    return _isolated(lambda: _execute(sql, trace, warehouse, timeout_s, limit), timeout_s)


GRACE_S = 5.0
"""Seconds a query's process gets past its time limit to stop on DuckDB's interrupt before it is killed."""


def _execute(sql: str, trace, warehouse, timeout_s: float, limit: int) -> Result:
    try:
        con = open_session(trace, warehouse)
    except duckdb.Error as e:
        raise QueryError(f"cannot open the session: {_first_line(e)}") from None
    timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
    try:
        if timer:
            timer.start()
        with _data_limit(limit):
            rel = None
            for st in con.extract_statements(sql):
                rel = con.execute(st)
            return Result([d[0] for d in rel.description], rel.fetchall())
    except duckdb.PermissionException as e:
        raise QueryRefused(f"maya sql only reads Maya's data directories: {_first_line(e)}") from None
    except duckdb.InterruptException:
        raise _too_long(timeout_s) from None
    except (duckdb.OutOfMemoryException, MemoryError) as e:
        raise _too_big(limit, _first_line(e) if str(e) else "out of memory") from None
    except duckdb.Error as e:
        raise QueryError(_first_line(e)) from None
    finally:
        if timer:
            timer.cancel()
        con.close()


def _too_long(timeout_s: float) -> QueryLimit:
    return QueryLimit(f"the query ran longer than {timeout_s:g} s (MAYA_SQL_TIMEOUT) and was stopped")


def _too_big(limit: int, why: str) -> QueryLimit:
    return QueryLimit(
        f"the query needs more memory than maya sql allows ({limit / 2**30:.1f} GiB, MAYA_SQL_MEMORY): {why}"
    )


_ERRORS = {"QueryError": QueryError, "QueryRefused": QueryRefused, "QueryLimit": QueryLimit}


def _isolated(run: Callable[[], Result], timeout_s: float) -> Result:
    """`run()` in a forked child; its result or documented error comes back pickled through a pipe."""
    from maya_trace_spec import TraceError

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        try:
            try:
                payload: tuple = ("ok", run())
            except TraceError as e:
                payload = ("trace", type(e).__name__, e.path, e.problem)
            except QueryError as e:
                payload = ("error", type(e).__name__, str(e))
            except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it as a QueryError
                payload = ("error", "QueryError", f"{type(e).__name__}: {e}")
            with os.fdopen(write, "wb") as out:
                pickle.dump(payload, out)
        finally:
            os._exit(0)
    os.close(write)
    deadline = None if not timeout_s else time.monotonic() + timeout_s + GRACE_S
    chunks = []
    try:
        with os.fdopen(read, "rb") as pipe:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not select.select([pipe], [], [], wait)[0]:
                    os.kill(pid, signal.SIGKILL)
                    raise _too_long(timeout_s)
                chunk = os.read(pipe.fileno(), 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        _, status = os.waitpid(pid, 0)
    if not chunks:
        code = os.waitstatus_to_exitcode(status)
        raise QueryLimit(
            f"the query's process ended with {'signal ' + str(-code) if code < 0 else 'exit ' + str(code)}"
            " before answering (out of memory?)"
        )
    payload = pickle.loads(b"".join(chunks))
    if payload[0] == "ok":
        return payload[1]
    if payload[0] == "trace":
        import maya_trace_spec.errors as errors

        raise getattr(errors, payload[1])(payload[2], payload[3])
    raise _ERRORS[payload[1]](payload[2])


def memory_limit() -> int:
    """`$MAYA_SQL_MEMORY` in bytes (`8GB`, `512MiB`, `1073741824`), default half the physical memory."""
    raw = settings.SQL_MEMORY.get()
    if not raw:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    m = _SIZE.match(raw)
    if not m:
        raise QueryError(f"{settings.SQL_MEMORY.name}={raw!r} is not a size such as 8GB or 512MiB")
    scale = 1024 ** "_KMGT".index((m.group(2) or "_").upper())
    return int(float(m.group(1)) * scale)


def _timeout() -> float:
    raw = settings.SQL_TIMEOUT.get()
    try:
        return DEFAULT_TIMEOUT_S if not raw else float(raw)
    except ValueError:
        raise QueryError(f"{settings.SQL_TIMEOUT.name}={raw!r} is not a number of seconds") from None


@contextmanager
def _data_limit(budget: int) -> Iterator[None]:
    """While the query runs, this process may grow its data segment by about `budget` bytes (and DuckDB's
    own 10% over its buffers) and no more: an allocation past it fails (Linux; elsewhere no limit)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        used = _data_bytes()
    except (ImportError, OSError, ValueError, AttributeError):
        yield
        return
    limit = used + budget + budget // 10 + (256 << 20)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft < limit:
        yield
        return
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _data_bytes() -> int:
    """This process's data segment now (`VmData` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no VmData")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
