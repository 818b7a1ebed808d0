"""Writer/reader of maya_trace_spec: round trips, atomicity, versions, migrations, bad files."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import tree_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maya_trace_spec import (
    SPEC_VERSION,
    TABLES,
    Run,
    RunWriter,
    TraceCorruptError,
    TraceError,
    TraceSchemaError,
    TraceVersionError,
    file_schema,
    migrations,
    read_file,
    read_table,
    table_files,
)
from maya_trace_spec.reader import migrate_run
from maya_trace_spec.schema import TABLE_KEY, VERSION_KEY
from maya_trace_spec.writer import atomic_path

# ------------------------------------------------------------------ round trips

_opt = lambda s: st.one_of(st.none(), s)  # noqa: E731
api_row = st.fixed_dictionaries(
    {
        "seq": st.integers(0, 2**40),
        "api": st.sampled_from(["cudaLaunchKernel", "cublasGemmEx", "ncclAllReduce"]),
        "domain": st.sampled_from(["runtime", "cublas", "nccl"]),
        "start_ns": st.integers(-(2**62), 2**62),
        "duration_ns": _opt(st.integers(0, 2**40)),
        "time_source": st.sampled_from(["emulated", "measured", "predicted"]),
        "grid_x": _opt(st.integers(0, 2**31 - 1)),
        "gemm_trans_a": _opt(st.booleans()),
        "gemm_dtype_a": _opt(st.text(max_size=8)),
        "args": _opt(st.text()),
    }
)
op_row = st.fixed_dictionaries(
    {
        "op_id": st.integers(0, 2**40),
        "name": st.text(min_size=1, max_size=20),
        "start_ns": st.integers(0, 2**50),
        "input_shapes": _opt(st.lists(st.lists(st.integers(0, 2**20), max_size=4), max_size=4)),
        "input_dtypes": _opt(st.lists(_opt(st.text(max_size=10)), max_size=4)),
        "phase": _opt(st.sampled_from(["forward", "backward", "optimizer", "other"])),
    }
)


def _columns(rows, name):
    names = [f.name for f in file_schema(name)]
    return {n: [r.get(n) for r in rows] for n in names if any(n in r for r in rows)} or {
        n: [] for n in TABLES[name].column_names if not TABLES[name].column(n).nullable and n != "rank"
    }


def _write_minimal_run(w):
    w.write(
        "run",
        {"run_id": ["r"], "created_at_ns": [1], "source": ["synthetic"], "status": ["complete"], "world_size": [4]},
    )


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(api_row, max_size=30),
    ops=st.lists(op_row, max_size=30),
    rank=st.integers(0, 3),
    split=st.integers(0, 30),
)
def test_write_read_round_trip(tmp_path_factory, calls, ops, rank, split):
    run = tmp_path_factory.mktemp("rt")
    w = RunWriter(run)
    _write_minimal_run(w)
    # two parts: reading concatenates them in order
    for part in (calls[:split], calls[split:]):
        if part:
            w.write("api_calls", _columns(part, "api_calls"), rank=rank)
    if ops:
        w.write("ops", _columns(ops, "ops"), rank=rank)
    got_calls = read_table(run, "api_calls").to_pylist()
    got_ops = read_table(run, "ops").to_pylist()
    assert len(got_calls) == len(calls) and len(got_ops) == len(ops)
    for want, got in zip(calls, got_calls):
        assert got["rank"] == rank
        assert {k: got[k] for k in want} == want
        assert all(v is None for k, v in got.items() if k not in want and k != "rank")
    for want, got in zip(ops, got_ops):
        assert {k: got[k] for k in want} == want


def test_files_are_partitioned_compressed_and_versioned(run_dir):
    files = table_files(run_dir, "api_calls")
    assert [(r, p.parent.name, p.name) for r, p in files] == [
        (0, "rank=0", "part-00000.parquet"),
        (1, "rank=1", "part-00000.parquet"),
    ]
    meta = pq.read_metadata(files[0][1])
    kv = meta.schema.to_arrow_schema().metadata
    assert kv[VERSION_KEY] == SPEC_VERSION.encode() and kv[TABLE_KEY] == b"api_calls"
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert "rank" not in meta.schema.names  # lives in the directory name
    assert not list(run_dir.rglob("*.tmp"))


def test_encodings_and_statistics_follow_the_columns(run_dir):
    meta = pq.read_metadata(_one_file(run_dir)).row_group(0)
    col = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert col["api"].has_dictionary_page and col["time_source"].has_dictionary_page  # repeating strings
    assert not col["args"].has_dictionary_page  # free-form JSON: plain, zstd alone shrinks it
    assert "DELTA_BINARY_PACKED" in col["grid_x"].encodings
    # min/max only where a range filter can prune row groups: key, time, correlation
    assert {n for n, c in col.items() if c.is_stats_set} == {"seq", "start_ns", "correlation_id"}
    assert col["start_ns"].statistics.min <= col["start_ns"].statistics.max


def test_atomic_path_commits_only_a_finished_file(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"one")
    with pytest.raises(FileExistsError):
        with atomic_path(target, replace=False) as tmp:
            tmp.write_bytes(b"two")
    with atomic_path(target, replace=True) as tmp:
        tmp.write_bytes(b"three")
    assert target.read_bytes() == b"three" and [p.name for p in target.parent.iterdir()] == ["f.bin"]


def test_run_table_is_replaced_whole_and_parts_accumulate(run_dir):
    w = RunWriter(run_dir)
    info = Run(run_dir).info
    w.write("run", {**{k: [v] for k, v in info.items()}, "status": ["failed"]})
    assert Run(run_dir).info["status"] == "failed"
    before = read_table(run_dir, "api_calls", ranks=[0]).num_rows
    from maya_trace_spec.synthetic import api_calls

    path = w.write("api_calls", api_calls(7, seed=9), rank=0)
    assert path.name == "part-00001.parquet"
    assert read_table(run_dir, "api_calls", ranks=[0]).num_rows == before + 7


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    w = RunWriter(tmp_path)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError):
        w.write("memory_events", {"seq": [0], "ts_ns": [0], "kind": ["alloc"], "bytes": [1]}, rank=0)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize(
    "data, problem",
    [
        ({"seq": [0], "ts_ns": [0], "kind": ["alloc"]}, "required column 'bytes' is missing"),
        ({"seq": [0], "ts_ns": [0], "kind": ["alloc"], "bytes": [1], "bogus": [1]}, "unknown column"),
        ({"seq": [None], "ts_ns": [0], "kind": ["alloc"], "bytes": [1]}, "'seq' is required"),
        ({"seq": ["x"], "ts_ns": [0], "kind": ["alloc"], "bytes": [1]}, "does not convert"),
    ],
)
def test_writer_rejects_bad_rows(tmp_path, data, problem):
    with pytest.raises(TraceSchemaError, match=problem):
        RunWriter(tmp_path).write("memory_events", data, rank=0)
    assert not (tmp_path / "memory_events").exists()


# ------------------------------------------------------------------ bad files


def _one_file(run_dir):
    return table_files(run_dir, "api_calls")[0][1]


def _rewrite(path, table, version=SPEC_VERSION, name="api_calls"):
    table = table.replace_schema_metadata({VERSION_KEY: version.encode(), TABLE_KEY: name.encode()})
    pq.write_table(table, path)


def test_truncated_file(run_dir):
    f = _one_file(run_dir)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(TraceCorruptError, match=r"part-00000\.parquet.*truncated or not Parquet"):
        read_table(run_dir, "api_calls")


def test_not_parquet(run_dir):
    f = _one_file(run_dir)
    f.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(TraceCorruptError, match=str(f)):
        read_file(f)


def test_parquet_without_spec_metadata(tmp_path):
    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), f)
    with pytest.raises(TraceSchemaError, match="not a Maya trace table"):
        read_file(f)


def test_newer_major_rejected(run_dir):
    f = _one_file(run_dir)
    _rewrite(f, pq.read_table(f), version="2.0.0")
    with pytest.raises(TraceVersionError, match=r"2\.0\.0.*newer major.*upgrade Maya"):
        read_table(run_dir, "api_calls")


def test_missing_column(run_dir):
    f = _one_file(run_dir)
    _rewrite(f, pq.read_table(f).drop_columns(["api"]))
    with pytest.raises(TraceSchemaError, match="missing column 'api'"):
        read_table(run_dir, "api_calls")


def test_mistyped_column(run_dir):
    f = _one_file(run_dir)
    t = pq.read_table(f)
    t = t.set_column(t.schema.get_field_index("seq"), "seq", t.column("seq").cast(pa.float64()))
    _rewrite(f, t)
    with pytest.raises(TraceSchemaError, match="column 'seq' has type double, expected int64"):
        read_table(run_dir, "api_calls")


def test_a_projection_reads_only_the_columns_asked_for_and_checks_them(run_dir):
    """`read_table(..., columns=...)` (deduplication reads a few of rank 0's columns): those and `rank`, equal to the
    same columns of the whole table; a mistyped one is still an error, and a file of an older minor is read whole
    (its missing nullable columns null) before the columns are taken."""
    whole = read_table(run_dir, "api_calls")
    part = read_table(run_dir, "api_calls", columns=["comm_id", "seq"])
    assert part.column_names == ["rank", "comm_id", "seq"] and part.equals(whole.select(part.column_names))
    f = _one_file(run_dir)
    older = pq.read_table(f).drop_columns(["grid_x"])
    _rewrite(f, older, version="1.0.0")
    part = read_table(run_dir, "api_calls", [0], columns=["grid_x", "seq"])
    assert part.column("grid_x").null_count == len(part) == len(older) and part.column("seq").equals(older["seq"])
    t = older.set_column(older.schema.get_field_index("seq"), "seq", older.column("seq").cast(pa.float64()))
    _rewrite(f, t.append_column(whole.schema.field("grid_x"), pa.nulls(len(t), pa.int32())))
    with pytest.raises(TraceSchemaError, match="column 'seq' has type double, expected int64"):
        read_table(run_dir, "api_calls", [0], columns=["seq"])


def test_a_projection_does_not_read_the_other_columns(run_dir):
    """A current file whose other columns are damaged (one mistyped, one missing): the whole read refuses it, the
    projection reads the columns asked for, equal to what they were."""
    f = _one_file(run_dir)
    before = read_table(run_dir, "api_calls", [0], columns=["comm_id", "seq"])
    damaged = pq.read_table(f).drop_columns(["api"])
    at = damaged.schema.get_field_index("duration_ns")
    _rewrite(f, damaged.set_column(at, "duration_ns", damaged.column("duration_ns").cast(pa.string())))
    with pytest.raises(TraceSchemaError, match="missing column 'api'"):
        read_table(run_dir, "api_calls", [0])
    assert read_table(run_dir, "api_calls", [0], columns=["comm_id", "seq"]).equals(before)
    with pytest.raises(TraceSchemaError, match="column 'duration_ns' has type string"):
        read_table(run_dir, "api_calls", [0], columns=["duration_ns"])


def test_a_projection_is_checked_against_the_tables_spec(run_dir):
    """Columns not in the table's spec are named, a str is refused, a column asked twice is read once, `rank` may be
    asked, no column gives every row's `rank`, and a column the current file lacks is named as a whole read names it."""
    whole = read_table(run_dir, "api_calls")
    with pytest.raises(TraceSchemaError, match=r"unknown column\(s\) \['nope', 'other'\] asked of table 'api_calls'"):
        read_table(run_dir, "api_calls", columns=["seq", "nope", "other"])
    with pytest.raises(TraceSchemaError, match=r"unknown column\(s\) \['rank'\]"):
        read_file(_one_file(run_dir), columns=["rank"])
    with pytest.raises(TypeError, match="not the str 'seq'"):
        read_table(run_dir, "api_calls", columns="seq")
    assert read_table(run_dir, "api_calls", columns=["seq", "rank", "seq"]).equals(whole.select(["rank", "seq"]))
    assert read_table(run_dir, "api_calls", columns=[]).equals(whole.select(["rank"]))
    f = _one_file(run_dir)
    _rewrite(f, pq.read_table(f).drop_columns(["seq"]))
    with pytest.raises(TraceSchemaError, match=r"part-00000\.parquet: missing column 'seq' \(int64\)"):
        read_table(run_dir, "api_calls", columns=["comm_id", "seq"])


def test_wrong_table_in_place(run_dir):
    f = _one_file(run_dir)
    _rewrite(f, pq.read_table(f), name="ops")
    with pytest.raises(TraceSchemaError, match="holds table 'ops', expected 'api_calls'"):
        read_table(run_dir, "api_calls")


def test_stray_entries_and_temp_files(run_dir):
    (run_dir / "api_calls" / "rank=0" / ".part-00009.parquet.abc.tmp").write_bytes(b"half")
    assert read_table(run_dir, "api_calls").num_rows == 1000  # temp files are never read
    (run_dir / "api_calls" / "notarank").mkdir()
    with pytest.raises(TraceError, match="expected rank=N"):
        read_table(run_dir, "api_calls")


def test_not_a_run_directory(tmp_path):
    with pytest.raises(TraceError, match="not a Maya run directory"):
        Run(tmp_path)


# ------------------------------------------------------------------ minor versions


def test_older_minor_missing_nullable_column_reads_as_null(run_dir):
    f = _one_file(run_dir)
    _rewrite(f, pq.read_table(f).drop_columns(["data_dependent"]), version=SPEC_VERSION)
    with pytest.raises(TraceSchemaError):  # same minor: a missing column is an error
        read_file(f)
    major, minor = (int(x) for x in SPEC_VERSION.split(".")[:2])
    import maya_trace_spec.reader as io

    io_minor = io.CURRENT_MINOR
    try:
        io.CURRENT_MINOR = minor + 1  # this reader is one minor newer than the file
        t = read_file(f)
    finally:
        io.CURRENT_MINOR = io_minor
    assert t.column("data_dependent").null_count == t.num_rows


def test_newer_minor_extra_column_ignored(run_dir):
    f = _one_file(run_dir)
    t = pq.read_table(f)
    _rewrite(f, t.append_column("future_column", pa.array([1] * t.num_rows)), version="1.99.0")
    assert "future_column" not in read_file(f).column_names
    _rewrite(f, t.append_column("future_column", pa.array([1] * t.num_rows)), version=SPEC_VERSION)
    with pytest.raises(TraceSchemaError, match="unexpected column"):
        read_file(f)


def test_a_1_4_graph_replay_row_is_read_with_domain_device_as_1_5_writes_it(run_dir):
    f = _one_file(run_dir)
    t = pq.read_table(f)
    n = t.num_rows
    args = ['{"cuda_graph_replay": true}', '{"elements": 4}', None] + [None] * (n - 3)
    t = t.set_column(t.schema.get_field_index("args"), "args", pa.array(args, pa.string()))
    t = t.set_column(t.schema.get_field_index("domain"), "domain", pa.array(["runtime"] * n, pa.string()))
    _rewrite(f, t, version="1.4.0")
    assert read_file(f).column("domain").to_pylist()[:3] == ["device", "runtime", "runtime"]
    _rewrite(f, t, version="1.5.0")  # a current file is read as written
    assert read_file(f).column("domain").to_pylist()[:3] == ["runtime"] * 3


# ------------------------------------------------------------------ migrations


def _write_v0(run_dir):
    """A synthetic major-0 layout: `name` instead of `api`, times as float microseconds."""
    f = _one_file(run_dir)
    t = pq.read_table(f)
    v0 = (
        t.drop_columns(["api", "start_ns"])
        .append_column("name", t.column("api"))
        .append_column("ts_us", pa.compute.divide(t.column("start_ns").cast(pa.float64()), 1000.0))
    )
    _rewrite(f, v0, version="0.3.0")
    return f, t


def _v0_to_v1(name, table):
    assert name == "api_calls"
    start = pa.compute.round(pa.compute.multiply(table.column("ts_us"), 1000.0)).cast(pa.int64())
    return (
        table.drop_columns(["ts_us"])
        .rename_columns(["api" if c == "name" else c for c in table.drop_columns(["ts_us"]).column_names])
        .append_column("start_ns", start)
    )


def test_old_major_without_migration_is_rejected(run_dir):
    f, _ = _write_v0(run_dir)
    with pytest.raises(TraceVersionError, match="no migration from major 0 to 1"):
        read_file(f)


def test_migration_hook_upgrades_v0(run_dir, monkeypatch):
    f, original = _write_v0(run_dir)
    monkeypatch.setitem(migrations.MIGRATIONS, 0, _v0_to_v1)
    migrated = read_file(f)  # on the fly
    assert migrated.column("api").to_pylist() == original.column("api").to_pylist()
    assert migrated.column("start_ns").to_pylist() == original.column("start_ns").to_pylist()
    before = tree_digest(run_dir)
    assert migrate_run(run_dir) == 1  # in place, atomically
    after = tree_digest(run_dir)
    assert [k for k in after if before[k] != after[k]] == [str(f.relative_to(run_dir))]
    assert pq.read_schema(f).metadata[VERSION_KEY] == SPEC_VERSION.encode()
    assert migrate_run(run_dir) == 0  # idempotent


def test_rank_directory_is_not_read_as_a_column(run_dir, monkeypatch):
    """pyarrow 19's `read_table` infers hive partitions from the path (`rank=0` -> a `rank` column) unless told
    not to; the reader must not let that column in (an llm-foundry environment's pyarrow failed `maya predict`)."""
    hive_read = pq.read_table

    def pyarrow19(path, *args, partitioning="hive", **kwargs):
        table = hive_read(path, *args, **kwargs)
        if partitioning == "hive" and "rank=" in str(path):
            rank = int(str(path).split("rank=")[1].split("/")[0])
            table = table.append_column("rank", pa.array([rank] * table.num_rows, pa.int32()))
        return table

    monkeypatch.setattr(pq, "read_table", pyarrow19)
    f = _one_file(run_dir)
    assert "rank=" in str(f)
    assert "rank" not in read_file(f).column_names
    assert read_table(run_dir, "api_calls", [0]).num_rows > 0
