"""Regressions found by fuzzing (tests/reliability): the read-only SQL gate refuses EXPLAIN ANALYZE in every
spelling (it wrote files into Maya's home), bounds memory (a billion-element list killed the process) and
time (an EXPLAIN that plans for minutes ignored DuckDB's interrupt), with documented errors only."""

import os
import subprocess
import sys
import time

import pytest
from helpers import tree_digest

from maya.core.sql import QueryError, QueryLimit, QueryRefused, run_query


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN /* x */ ANALYZE COPY (SELECT 42) TO '{home}/leak.csv'",  # wrote leak.csv: the regex missed the comment
        "EXPLAIN (ANALYZE) COPY (SELECT 42) TO '{home}/leak.csv'",
        "explain\n-- c\nanalyse SELECT 1",
        "EXPLAIN COPY (SELECT 42) TO '{home}/leak.csv'",  # EXPLAIN of a write
        "SELECT 1; EXPLAIN/**/ANALYZE SELECT 1",
    ],
)
def test_explain_analyze_and_explained_writes_are_refused(run_dir, maya_home, sql):
    before = tree_digest(maya_home)
    with pytest.raises(QueryRefused, match="read-only"):
        run_query(sql.format(home=maya_home), trace=run_dir)
    assert tree_digest(maya_home) == before and not (maya_home / "leak.csv").exists()


def test_statements_duckdb_cannot_name_are_refused(run_dir):
    """`UPDATE EXTENSIONS` made DuckDB's Python API raise ValueError("29 is not a valid StatementType")."""
    with pytest.raises(QueryRefused, match="UPDATE EXTENSIONS"):
        run_query("UPDATE EXTENSIONS", trace=run_dir)


@pytest.mark.slow
def test_plain_explain_still_runs(run_dir):
    assert run_query("EXPLAIN SELECT count(*) FROM api_calls", trace=run_dir).rows
    assert run_query("EXPLAIN (FORMAT json) SELECT 1").rows


@pytest.mark.slow
def test_nothing_spills_to_disk(run_dir):
    """DuckDB's spill directory (`.tmp` in the working directory) was an allowed, writable directory."""
    allowed = run_query("SELECT current_setting('allowed_directories')", trace=run_dir).rows[0][0]
    assert not any(d.rstrip("/").endswith(".tmp") for d in allowed)
    assert run_query("SELECT current_setting('temp_directory')").rows[0][0] == ""


def test_errors_are_query_errors(run_dir):
    with pytest.raises(QueryError, match="no_such_table"):
        run_query("SELECT * FROM no_such_table", trace=run_dir)
    assert issubclass(QueryRefused, QueryError) and issubclass(QueryLimit, QueryError)


@pytest.mark.slow  # waits out the timeout: ~6 s
def test_a_statement_that_ignores_the_interrupt_is_stopped(run_dir):
    t0 = time.monotonic()
    with pytest.raises(QueryLimit, match="longer than 1 s"):
        run_query("EXPLAIN SELECT repeat('x', 100000000)", trace=run_dir, timeout_s=1)
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
def test_endless_queries_stop_at_the_time_limit(monkeypatch):
    monkeypatch.setenv("MAYA_SQL_TIMEOUT", "1")
    with pytest.raises(QueryLimit, match="MAYA_SQL_TIMEOUT"):
        run_query("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t")


MEMORY = """
import os, resource
resource.setrlimit(resource.RLIMIT_DATA, (6 << 30, 6 << 30))  # whatever happens, this machine keeps its memory
os.environ["MAYA_SQL_MEMORY"] = "512MB"
from maya.core.sql import QueryLimit, run_query
for sql in ("SELECT range(0, 1000000000)", "SELECT list(range) FROM range(100000000)"):
    try:
        run_query(sql)
    except QueryLimit as e:
        print("limit:", e)
print(run_query("SELECT 42").rows)
"""


@pytest.mark.slow
def test_memory_exhaustion_is_a_query_limit_and_the_process_lives():
    r = subprocess.run([sys.executable, "-c", MEMORY], capture_output=True, text=True, timeout=300, env={**os.environ})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("limit: the query needs more memory than maya sql allows (0.5 GiB") == 2, r.stdout
    assert r.stdout.strip().endswith("[(42,)]")
