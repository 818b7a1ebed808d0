"""The read-only SQL gate (`maya.core.sql.run_query`, what `maya sql` runs): generated statements that try to
write (DML, DDL, COPY, EXPORT, ATTACH, INSTALL/LOAD, SET, PRAGMA, CALL, transactions, ...), to read files
outside Maya's directories (absolute, relative, `..`, `~`, URLs, /proc), or to exhaust memory or time (huge
lists and strings, cross joins, endless recursion) — hidden behind comments, case, EXPLAIN [ANALYZE],
CTEs, subqueries, `query()`, several statements — plus ordinary reads and bytes flipped in all of them.
A statement returns rows or raises a `QueryError` (`QueryRefused`: nothing ran; `QueryLimit`: stopped);
after every one, the warehouse, the run, Maya's home and the outside directory are byte for byte as they
were, nothing new appeared, and no row holds the outside file's secret."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface

from maya_trace_spec import TraceError, synthetic

SECRET = "MAYA-FUZZ-SECRET-7f3a"
TIMEOUT_S = 2.0
MEMORY = "512MB"


@dataclass(frozen=True)
class Sandbox:
    home: Path
    run: Path
    warehouse: Path
    outside: Path


@lru_cache(maxsize=1)
def sandbox() -> Sandbox:
    from maya.core.warehouse import register_run

    root = Path(tempfile.mkdtemp(prefix="maya-fuzz-sql-"))
    home, outside = root / "home", root / "outside"
    outside.mkdir(parents=True)
    (outside / "secret.csv").write_text(f"a\n{SECRET}\n")
    (outside / "secret.parquet").write_bytes(b"")
    run = synthetic.write_run(home / "runs" / "r", world_size=1, calls_per_rank=20, ops_per_rank=5)
    warehouse = home / "warehouse.duckdb"
    register_run(run, warehouse)
    (home / "link-outside").symlink_to(outside)  # a user's own link out of Maya's home
    return Sandbox(home, run, warehouse, outside)


def _paths(box: Sandbox) -> list[str]:
    o, h = box.outside, box.home
    return [
        str(o / "secret.csv"),
        f"{h}/../outside/secret.csv",
        f"{box.run}/../../../outside/secret.csv",
        "secret.csv",
        "../outside/secret.csv",
        "~/secret.csv",
        f"file://{o}/secret.csv",
        "http://127.0.0.1:9/x.csv",
        "https://example.com/x.parquet",
        "s3://bucket/x.parquet",
        "/proc/self/environ",
        "/etc/passwd",
        str(o),
        f"{o}/*",
        str(h / "new.csv"),
        str(box.run / "api_calls" / "rank=0" / "part-00000.parquet"),
        str(box.warehouse),
        str(h / "estimators" / "v1" / "model.zip"),
        f"{h}/runs/r/leak.parquet",
    ]


WRITES = [
    "INSERT INTO runs SELECT * FROM runs",
    "UPDATE runs SET status = 'x'",
    "DELETE FROM runs",
    "TRUNCATE runs",
    "CREATE TABLE t AS SELECT 1",
    "CREATE OR REPLACE VIEW runs AS SELECT 1",
    "DROP TABLE runs",
    "ALTER TABLE runs ADD COLUMN x INTEGER",
    "COPY runs TO '{path}'",
    "COPY (SELECT * FROM api_calls) TO '{path}' (FORMAT parquet)",
    "COPY runs FROM '{path}'",
    "EXPORT DATABASE '{dir}'",
    "IMPORT DATABASE '{dir}'",
    "ATTACH '{path}' AS x",
    "ATTACH '{path}' AS x (READ_WRITE)",
    "DETACH warehouse",
    "USE memory",
    "INSTALL httpfs",
    "LOAD httpfs",
    "FORCE INSTALL json",
    "SET enable_external_access = true",
    "RESET allowed_directories",
    "SET allowed_directories = ['/']",
    "PRAGMA enable_profiling",
    "PRAGMA memory_limit='100GB'",
    "CALL checkpoint()",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "BEGIN TRANSACTION",
    "COMMIT",
    "ROLLBACK",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    "CREATE SECRET s (TYPE s3)",
    "CREATE MACRO m(a) AS a",
    "CREATE SEQUENCE s",
    "UPDATE EXTENSIONS",
    "INSERT INTO warehouse.runs SELECT * FROM runs",
    "CREATE TYPE e AS ENUM ('a')",
    "ANALYZE",
    "SET threads = 1",
    "COPY (SELECT '{secret}') TO '{path}'",
]
READS = [
    "SELECT * FROM read_csv('{path}')",
    "SELECT * FROM read_csv_auto('{path}')",
    "SELECT * FROM read_text('{path}')",
    "SELECT * FROM read_blob('{path}')",
    "SELECT * FROM read_parquet('{path}')",
    "SELECT * FROM read_json('{path}')",
    "SELECT * FROM glob('{path}')",
    "SELECT * FROM parquet_metadata('{path}')",
    "SELECT * FROM sniff_csv('{path}')",
    "SELECT * FROM '{path}'",
    "FROM '{path}'",
    "SELECT * FROM parquet_schema('{path}')",
    "SELECT content FROM read_text('{path}') WHERE content LIKE '%SECRET%'",
]
HEAVY = [
    "SELECT range(0, {n})",
    "SELECT repeat('x', {n})",
    "SELECT count(*) FROM range({n}) a, range({n}) b",
    "SELECT list(range) FROM range({n})",
    "SELECT string_agg(repeat('y', 1000), ',') FROM range({n})",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t",
    "SELECT count(*) FROM range({n})",
    "SELECT * FROM range({n})",
    "SELECT * FROM range({n}) ORDER BY random()",
    "SELECT md5(range::VARCHAR) FROM range({n}) ORDER BY 1",
]
ORDINARY = [
    "SELECT count(*) FROM api_calls",
    "SELECT api, count(*) FROM api_calls GROUP BY 1",
    "SELECT * FROM runs",
    "SUMMARIZE ops",
    "DESCRIBE kernels",
    "SHOW TABLES",
    "SELECT * FROM duckdb_settings()",
    "PIVOT ops ON phase",
    "SELECT current_setting('allowed_directories')",
    "SELECT * FROM no_such_table",
    "SELECT 1 +",
    "",
    "SELECT getenv('HOME')",
    "SELECT * FROM query('SELECT 42')",
    "SELECT * FROM checkpoint()",
    "SELECT * FROM pragma_database_list()",
    "SELECT nextval('s')",
    "SELECT * FROM duckdb_extensions()",
]
WRAPPERS = [
    "{s}",
    "{s}",
    "/* x */ {s}",
    "-- c\n{s}",
    "{s};",
    "SELECT 1; {s}",
    "{s}; SELECT 1",
    "EXPLAIN {s}",
    "EXPLAIN ANALYZE {s}",
    "EXPLAIN /**/ ANALYZE {s}",
    "EXPLAIN (ANALYZE) {s}",
    "explain\n--x\nanalyse {s}",
    "WITH x AS (SELECT 1) {s}",
    "SELECT * FROM ({s})",
    "SELECT * FROM query('{q}')",
    "  {S}  ",
]


@st.composite
def statements(draw) -> str:
    box = sandbox()
    kind = draw(st.sampled_from(["write", "read", "heavy", "ordinary", "write", "read"]))
    template = draw(st.sampled_from({"write": WRITES, "read": READS, "heavy": HEAVY, "ordinary": ORDINARY}[kind]))
    paths = _paths(box)
    body = template.format(
        path=draw(st.sampled_from(paths)),
        dir=draw(st.sampled_from([str(box.home / "export"), str(box.outside)])),
        secret=SECRET,
        n=draw(st.sampled_from([10, 1000, 10**6, 10**8, 10**9, 10**12])),
    )
    wrapper = draw(st.sampled_from(WRAPPERS))
    sql = wrapper.format(s=body, S=body.upper() if draw(st.booleans()) else body, q=body.replace("'", "''"))
    flips = draw(
        st.lists(st.tuples(st.integers(0, 400), st.characters(codec="utf-8")), max_size=2)
        if draw(st.integers(0, 9)) == 0
        else st.just([])
    )
    chars = list(sql)
    for pos, c in flips:
        if chars:
            chars[pos % len(chars)] = c
    return "".join(chars)


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            out[str(p)] = "dir" if p.is_dir() and not p.is_symlink() else "link"
        else:
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@lru_cache(maxsize=1)
def _before() -> tuple[dict, dict, set]:
    box = sandbox()
    return _digest(box.home), _digest(box.outside), set(os.listdir("."))


def check(sql: str) -> None:
    from maya.core.sql import run_query

    box = sandbox()
    home, outside, cwd = _before()
    saved = {k: os.environ.get(k) for k in ("MAYA_HOME", "MAYA_SQL_MEMORY")}
    os.environ.update(MAYA_HOME=str(box.home), MAYA_SQL_MEMORY=MEMORY)
    try:
        result = run_query(sql, trace=box.run, warehouse=box.warehouse, timeout_s=TIMEOUT_S)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        after = _digest(box.home), _digest(box.outside), set(os.listdir("."))
        if after != (home, outside, cwd):
            changed = {k for k in set(after[0]) | set(home) if after[0].get(k) != home.get(k)}
            changed |= {k for k in set(after[1]) | set(outside) if after[1].get(k) != outside.get(k)}
            raise Corrupt(f"files changed: {sorted(changed | (after[2] ^ cwd))[:5]}")
    if SECRET in repr(result.rows):
        raise Corrupt("a row holds the outside file's secret")


def surfaces() -> list[Surface]:
    from maya.core.sql import QueryError, QueryRefused

    sandbox()
    _before()
    return [
        Surface(
            "sql gate",
            statements(),
            check,
            errors=(QueryError, TraceError),
            timeout_s=30,
            refusal=lambda e: isinstance(e, QueryRefused),
        )
    ]
