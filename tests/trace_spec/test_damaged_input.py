"""Regressions found by fuzzing (tests/reliability): damaged or unusual trace files and Kineto JSON get a
clear `TraceError` (or validation problem), never another exception or silently different data."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paths import FIXTURES

from maya_trace_spec import (
    Run,
    TraceCorruptError,
    TraceError,
    TraceSchemaError,
    read_file,
    read_table,
    synthetic,
    table_files,
)
from maya_trace_spec.duck import register_run
from maya_trace_spec.interop.kineto import KinetoFormatError, import_kineto
from maya_trace_spec.schema import VERSION_KEY
from maya_trace_spec.validation import validate_run


@pytest.fixture
def small_run(tmp_path):
    return synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=40, ops_per_rank=8)


def _rewrite(path, table, metadata=None):
    md = {**(pq.read_schema(path).metadata or {}), **(metadata or {})}
    pq.write_table(table.replace_schema_metadata(md), path)


def test_nulls_in_a_required_column_are_a_schema_error(small_run):
    path = table_files(small_run, "ops")[0][1]
    table = pq.read_table(path)
    names = table.column("name").to_pylist()
    names[2] = None
    table = table.set_column(table.column_names.index("name"), pa.field("name", pa.string()), pa.array(names))
    _rewrite(path, table)
    with pytest.raises(TraceSchemaError, match="required column 'name' holds 1 null"):
        read_table(small_run, "ops")
    assert any("'name'" in p.problem for p in validate_run(small_run))


def test_metadata_that_is_not_utf8_is_a_schema_error(small_run):
    path = table_files(small_run, "kernels")[0][1]
    _rewrite(path, pq.read_table(path), {VERSION_KEY: b"1.\xf2.0"})
    with pytest.raises(TraceSchemaError, match="not UTF-8"):
        read_file(path)


@pytest.mark.slow
def test_every_arrow_error_of_a_damaged_footer_is_a_corrupt_file(small_run):
    """A flipped footer byte made pyarrow raise ArrowNotImplementedError ("Integers with less than 8 bits").
    Every footer byte is flipped (~10-30 s here)."""
    path = table_files(small_run, "api_calls")[0][1]
    data = path.read_bytes()
    footer = len(data) - int.from_bytes(data[-8:-4], "little") - 8
    raised = set()
    for i in range(footer, len(data) - 8):
        damaged = bytearray(data)
        damaged[i] ^= 0x5A
        path.write_bytes(bytes(damaged))
        try:
            read_file(path, "api_calls")
        except TraceError as e:
            raised.add(type(e))
    assert TraceCorruptError in raised


@pytest.mark.slow
def test_a_flipped_data_page_byte_is_detected_not_read_as_other_values(small_run):
    """Pages carry CRC-32 checksums, verified on read: before them, 5% of single-byte flips of a file's data
    pages read back as different values with no error."""
    path = table_files(small_run, "api_calls")[0][1]
    original = read_file(path, "api_calls")
    data = path.read_bytes()
    footer = len(data) - int.from_bytes(data[-8:-4], "little") - 8
    silent = []
    for i in range(4, footer, 7):
        damaged = bytearray(data)
        damaged[i] ^= 0x01
        path.write_bytes(bytes(damaged))
        try:
            if not read_file(path, "api_calls").equals(original):
                silent.append(i)
        except TraceCorruptError:
            pass
    assert silent == []


def test_rows_lost_to_a_damaged_footer_are_detected(small_run):
    path = table_files(small_run, "ops")[0][1]
    table = pq.read_table(path)
    meta = pq.read_metadata(path)
    assert meta.num_rows == 8
    # a footer whose row group counts fewer rows than the file: rewrite the row group's count (thrift i64, zigzag)
    data = bytearray(path.read_bytes())
    needle = bytes([0x16, 8 << 1])  # field "num_rows" of the row group: zigzag varint 16
    hits = [i for i in range(len(data) - 8) if data[i : i + 2] == needle]
    for i in hits:
        damaged = bytearray(data)
        damaged[i + 1] = 5 << 1
        path.write_bytes(bytes(damaged))
        try:
            read = read_file(path, "ops")
        except TraceCorruptError:
            continue
        assert read.num_rows == table.num_rows


def test_rank_directories_beyond_int32_are_refused(small_run):
    (small_run / "ops" / "rank=0").rename(small_run / "ops" / "rank=4294967296")
    with pytest.raises(TraceError, match="beyond the largest rank"):
        read_table(small_run, "ops")
    assert any("beyond the largest rank" in p.problem for p in validate_run(small_run))


@pytest.mark.slow
def test_files_of_an_older_minor_without_nullable_columns_validate_and_query(small_run):
    """The cross-table checks and `maya sql` views read every column by name: a file of spec 1.0.0 lacking
    nullable columns made DuckDB fail to bind."""
    import duckdb

    path = table_files(small_run, "kernels")[0][1]
    _rewrite(path, pq.read_table(path).drop_columns(["demangled", "library"]), {VERSION_KEY: b"1.0.0"})
    assert validate_run(small_run) == []
    con = duckdb.connect()
    register_run(con, small_run)
    assert con.execute("SELECT count(*), count(demangled) FROM kernels").fetchone() == (
        Run(small_run).table("kernels").num_rows,
        0,
    )


def test_views_read_only_the_runs_files(small_run):
    """`part-1.parquet` is not a part (five digits at least): the views read the files readers take, where
    their glob (`part-*.parquet`) counted its rows too."""
    import shutil

    import duckdb

    shutil.copy(table_files(small_run, "ops")[0][1], small_run / "ops" / "rank=0" / "part-1.parquet")
    con = duckdb.connect()
    register_run(con, small_run)
    assert con.execute("SELECT count(*) FROM ops").fetchone()[0] == 8


# ------------------------------------------------------------------ Kineto JSON


def _fixture() -> dict:
    return json.loads((FIXTURES / "kineto_gpu_small.json").read_text())


def _import(tmp_path, doc):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    return import_kineto([path], tmp_path / "out")


@pytest.mark.parametrize(
    "field, value", [("cat", {"a": 1}), ("cat", [1]), ("pid", [1, 2]), ("tid", {"x": 1}), ("pid", 1 << 70)]
)
def test_kineto_odd_categories_and_threads_are_ignored(tmp_path, field, value):
    doc = _fixture()
    for e in doc["traceEvents"][::3]:
        e[field] = value
    out = _import(tmp_path, doc)
    assert validate_run(out) == []


def test_kineto_ph_must_be_a_string(tmp_path):
    doc = _fixture()
    doc["traceEvents"][4]["ph"] = ["X"]
    with pytest.raises(KinetoFormatError, match=r"traceEvents\[4\] has a ph that is not a string"):
        _import(tmp_path, doc)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, value", [("ts", 1e30), ("dur", 10**20), ("ts", -(10**19))])
def test_kineto_times_beyond_int64_nanoseconds_are_refused(tmp_path, key, value):
    doc = _fixture()
    event = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    event[key] = value
    with pytest.raises(KinetoFormatError, match="int64 nanosecond range"):
        _import(tmp_path, doc)
    assert not (tmp_path / "out").exists()


def test_kineto_huge_exponent_is_refused(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_fixture()).replace('"ts": 1000.0', '"ts": 1e999999', 1))
    with pytest.raises(KinetoFormatError, match="int64 nanosecond range"):
        import_kineto([path], tmp_path / "out")


@pytest.mark.parametrize(
    "arg, value",
    [
        ("device", 1 << 40),
        ("grid", [1 << 33, 1, 1]),
        ("shared memory", 1 << 31),
        ("Process Group Ranks", [0, 1 << 31]),
        ("Addr", 1 << 64),
        ("Bytes", -(1 << 63)),
        ("External id", 1 << 64),
    ],
)
def test_kineto_integers_that_do_not_fit_their_column_are_not_recorded(tmp_path, arg, value):
    doc = _fixture()
    for e in doc["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"][arg] = value
    out = _import(tmp_path, doc)
    assert validate_run(out) == []


@pytest.mark.parametrize("info", [{"rank": 1 << 31}, {"rank": 0, "world_size": 1 << 31}, {"rank": (1 << 31) - 1}])
def test_kineto_ranks_and_world_sizes_beyond_int32(tmp_path, info):
    doc = _fixture()
    doc["distributedInfo"].update(info)
    try:
        out = _import(tmp_path, doc)
    except (KinetoFormatError, ValueError) as e:
        assert "rank" in str(e)
        assert not (tmp_path / "out").exists()
    else:
        assert validate_run(out) == []
