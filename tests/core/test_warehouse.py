"""The warehouse's openers: one transaction helper, read-only opens of missing files and tables, the
migrations of older layouts (idempotent, never losing a row) and waiting for another process's lock."""

import subprocess
import sys
import time

import duckdb
import pytest

from maya.core import warehouse_schema
from maya.core.warehouse import connect, insert_row, read_only, transaction
from maya.core.warehouse_schema import MIGRATIONS, TABLES, Migration, columns, pending


def _rows(path, sql):
    with read_only(path) as con:
        return con.execute(sql).fetchall()


def test_a_transaction_commits_when_its_block_ends(tmp_path):
    path = tmp_path / "w.duckdb"
    with transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v1"})
    assert _rows(path, "SELECT alias, version FROM estimator_aliases") == [("latest", "v1")]


def test_an_exception_in_the_middle_of_a_transaction_rolls_it_all_back(tmp_path):
    """Two rows written, then a failure: neither is stored, the rows before are untouched, and the
    connection is closed (the file is free for the next writer)."""
    path = tmp_path / "w.duckdb"
    with transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v1"})
    with pytest.raises(RuntimeError, match="interrupted"), transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v2"}, replace=True)
        insert_row(con, "estimator_aliases", {"alias": "stable", "version": "v2"})
        raise RuntimeError("interrupted")
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    assert _rows(path, "SELECT alias, version FROM estimator_aliases") == [("latest", "v1")]


def test_a_failing_statement_in_a_transaction_rolls_back_the_statements_before_it(tmp_path):
    path = tmp_path / "w.duckdb"
    with pytest.raises(duckdb.ConstraintException), transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v1"})
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v2"})  # same primary key
    assert _rows(path, "SELECT * FROM estimator_aliases") == []


def test_insert_row_places_values_by_column_name(tmp_path):
    path = tmp_path / "w.duckdb"
    with transaction(path) as con:
        insert_row(con, "estimator_aliases", {"version": "v3", "alias": "latest"})  # not the table's order
        with pytest.raises(ValueError, match="empty row for table 'runs'"):
            insert_row(con, "runs", {})
    assert _rows(path, "SELECT alias, version FROM estimator_aliases") == [("latest", "v3")]


def test_read_only_of_a_missing_file_reads_every_table_as_empty_and_creates_nothing(tmp_path):
    path = tmp_path / "missing" / "w.duckdb"
    with read_only(path) as con:
        for name in TABLES:
            assert con.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)
        frame = con.execute("SELECT * FROM validation_rows").df()
    assert frame.empty and {"suite", "row", "seq", "estimator_version", "recorded_at"} <= set(frame.columns)
    assert not path.parent.exists()


def test_read_only_of_a_warehouse_without_a_table_reads_it_as_empty(tmp_path):
    """A warehouse an older Maya wrote with `runs` only: its rows read, the tables it lacks are empty, and
    the file is not changed (a read-only open creates nothing)."""
    path = tmp_path / "w.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, path VARCHAR NOT NULL)")
    con.execute("INSERT INTO runs VALUES ('r1', '/runs/r1')")
    con.close()
    with read_only(path) as con:
        assert con.execute("SELECT run_id, path FROM runs").fetchall() == [("r1", "/runs/r1")]
        assert con.execute("SELECT version FROM estimator_aliases").fetchall() == []
    con = duckdb.connect(str(path), read_only=True)
    assert set(columns(con)) == {"runs"}
    con.close()


# The layout of the two migrated tables (and the table the kernel_profiles migration reads) before their
# columns were added: `kernel_profiles` before `timing` (2026-11-21), `validation_rows` before `seq` (2026-11-25).
OLD_LAYOUT = [
    "CREATE TABLE profile_files (hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL, "
    "format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL, PRIMARY KEY (hardware, campaign, path))",
    "CREATE TABLE kernel_profiles (hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL, "
    "row_index BIGINT NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL, dtype VARCHAR NOT NULL, batch DOUBLE, "
    'm DOUBLE, n DOUBLE, k DOUBLE, numel DOUBLE, "row" DOUBLE, operands DOUBLE, bytes DOUBLE, flops DOUBLE, '
    "measured_ns DOUBLE NOT NULL)",
    'CREATE TABLE validation_rows (suite VARCHAR NOT NULL, suite_digest VARCHAR NOT NULL, "row" INTEGER NOT NULL, '
    "estimator_version VARCHAR NOT NULL, predictor_digest VARCHAR NOT NULL, measured_s DOUBLE NOT NULL, "
    'recorded_at TIMESTAMP NOT NULL, PRIMARY KEY (suite_digest, "row", estimator_version, predictor_digest))',
    "INSERT INTO profile_files VALUES ('t4', 'neusight-train', 'n.parquet', 'neusight', 'x', 1), "
    "('t4', 'c1', 'm.parquet', 'measurements', 'y', 1)",
    "INSERT INTO kernel_profiles (hardware, campaign, path, row_index, family, op, dtype, m, measured_ns) VALUES "
    "('t4', 'neusight-train', 'n.parquet', 0, 'gemm', 'bmm', 'fp32', 64, 1e5), "
    "('t4', 'c1', 'm.parquet', 0, 'gemm', 'mm', 'fp32', 128, 2e5)",
    "INSERT INTO validation_rows VALUES ('s', 'd', 20, 'v1', 'p', 5.0, TIMESTAMP '2026-11-24 10:00:00'), "
    "('s', 'd', 21, 'v1', 'p', 6.0, TIMESTAMP '2026-11-24 10:01:00')",
]


@pytest.fixture
def old_warehouse(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    for statement in OLD_LAYOUT:
        con.execute(statement)
    con.close()
    return path


def _contents(path) -> dict:
    with read_only(path) as con:
        return {name: sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in TABLES}


@pytest.mark.slow
def test_migrations_bring_an_old_layout_up_to_date_once_and_keep_every_row(old_warehouse):
    connect(old_warehouse).close()
    con = duckdb.connect(str(old_warehouse), read_only=True)
    found = columns(con)
    assert pending(con) == ([], [])
    assert set(found) == set(TABLES)  # the tables it lacked are created
    assert all(m.column in found[m.table] for m in MIGRATIONS)
    assert con.execute("SELECT campaign, m, measured_ns, timing FROM kernel_profiles ORDER BY 1").fetchall() == [
        ("c1", 128.0, 2e5, "device"),
        ("neusight-train", 64.0, 1e5, "isolated"),  # NeuSight's rows were timed call by call
    ]
    assert con.execute('SELECT "row", measured_s, seq FROM validation_rows ORDER BY 1').fetchall() == [
        (20, 5.0, None),
        (21, 6.0, None),
    ]
    con.close()
    migrated = _contents(old_warehouse)
    connect(old_warehouse).close()  # again: nothing to do, nothing changes
    assert _contents(old_warehouse) == migrated


def test_a_failing_migration_leaves_the_old_layout_and_its_rows_whole(old_warehouse, monkeypatch):
    """The upgrade is one transaction: a migration failing half-way undoes the columns already added and the
    tables already created, and keeps every row."""
    before = _contents(old_warehouse)
    broken = Migration(
        "validation_rows", "seq", "INTEGER", since="test", backfill=("UPDATE validation_rows SET nope = 1",)
    )
    monkeypatch.setattr(warehouse_schema, "MIGRATIONS", (MIGRATIONS[0], broken))
    with pytest.raises(duckdb.BinderException, match="nope"):
        connect(old_warehouse)
    con = duckdb.connect(str(old_warehouse), read_only=True)
    assert set(columns(con)) == {"profile_files", "kernel_profiles", "validation_rows"}
    assert "timing" not in columns(con)["kernel_profiles"]
    con.close()
    assert _contents(old_warehouse) == before


def _write(path) -> None:
    with transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v2"}, replace=True)


def _read(path) -> None:
    assert _rows(path, "SELECT version FROM estimator_aliases") == [("v1",)]


@pytest.mark.slow
@pytest.mark.parametrize("opener", [_write, _read], ids=["writer", "reader"])
def test_openers_wait_for_another_process_writing(tmp_path, opener):
    """A writer or a reader waits while another process holds the warehouse file, then proceeds."""
    path = tmp_path / "w.duckdb"
    with transaction(path) as con:
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": "v1"})
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('held', flush=True); "
            "time.sleep(1.5); con.close()",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        opener(path)
        assert time.monotonic() - start > 0.5  # it waited for the holder rather than failing
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0
