"""Trace directories as Maya reads them: a small valid run, mutated — Parquet bytes flipped or cut, columns
dropped, renamed, retyped or added, metadata versions and table names changed, rows breaking the spec's
constraints or pointing at rows that do not exist, stray entries in the layout — then read
(`Run`, `read_table`) and validated (`validate_run`, `maya trace check`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface

from maya_trace_spec import TABLES, Run, RunWriter, TraceError, synthetic, table_files
from maya_trace_spec.columns import SPEC_VERSION
from maya_trace_spec.schema import TABLE_KEY, VERSION_KEY
from maya_trace_spec.validation import incomplete, validate_run

REFERENCES = {
    ("api_calls", "kernel_id"),
    ("api_calls", "op_id"),
    ("api_calls", "comm_id"),
    ("memory_events", "op_id"),
    ("ops", "parent_op_id"),
}
VERSIONS = [
    "2.0.0",
    "0.9.0",
    "1.0.0",
    "1.2.0",
    "1.1",
    "",
    "x.y.z",
    "1.1.0.0",
    "99999999999999999999.0.0",
    "-1.0.0",
    "１.1.0",
]
TYPES = [
    pa.int8(),
    pa.int32(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.bool_(),
    pa.binary(),
    pa.list_(pa.int64()),
    pa.timestamp("ns"),
    pa.null(),
]


class Undocumented(Exception):
    """A function documented never to raise raised."""


@lru_cache(maxsize=1)
def base_run() -> Path:
    root = Path(tempfile.mkdtemp(prefix="maya-fuzz-trace-"))
    run = synthetic.write_run(root / "run", world_size=1, calls_per_rank=40, ops_per_rank=8)
    row = Run(run).table("run").to_pylist()[0]
    RunWriter(run).write("run", {k: [v] for k, v in {**row, "run_id": "fuzz", "created_at_ns": 0}.items()})
    return run  # the same bytes in every session: a seed finds the same inputs


@lru_cache(maxsize=1)
def base_files() -> list[tuple[str, str]]:
    """(table, path relative to the run) of every file of the base run."""
    run = base_run()
    return [(name, str(p.relative_to(run))) for name in TABLES for _, p in table_files(run, name)]


@lru_cache(maxsize=1)
def base_tables() -> dict[str, pa.Table]:
    return {name: Run(base_run()).table(name) for name in TABLES}


@dataclass(frozen=True)
class Mutation:
    kind: str
    file: int
    params: Any

    def __repr__(self) -> str:
        return f"Mutation({self.kind}, {base_files()[self.file % len(base_files())][1]}, {self.params!r:.200})"


@dataclass(frozen=True)
class Damage:
    """Mutations applied in turn to a copy of the base run; `cli`: also run `maya trace check`."""

    mutations: tuple[Mutation, ...]
    cli: bool = False


edits = st.lists(st.tuples(st.booleans(), st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=8)
text = st.text(max_size=12)
mutation = st.one_of(
    st.builds(Mutation, st.just("bytes"), st.integers(0, 99), edits),
    st.builds(Mutation, st.just("truncate"), st.integers(0, 99), st.floats(0, 1)),
    st.builds(
        Mutation,
        st.just("columns"),
        st.integers(0, 99),
        st.tuples(
            st.sampled_from(["drop", "rename", "retype", "add"]), st.integers(0, 99), st.sampled_from(TYPES), text
        ),
    ),
    st.builds(
        Mutation,
        st.just("metadata"),
        st.integers(0, 99),
        st.tuples(
            st.one_of(st.sampled_from(VERSIONS), text, st.none()),
            st.one_of(st.sampled_from([*TABLES, "nope"]), text, st.none()),
        ),
    ),
    st.builds(Mutation, st.just("older_minor"), st.integers(0, 99), st.lists(st.integers(0, 99), max_size=4)),
    st.builds(
        Mutation,
        st.just("rows"),
        st.integers(0, 99),
        st.tuples(
            st.sampled_from(["null", "negative", "not_allowed", "dangling", "duplicate", "empty", "extra_run_row"]),
            st.integers(0, 99),
            st.integers(0, 1 << 40),
        ),
    ),
    st.builds(
        Mutation,
        st.just("layout"),
        st.integers(0, 99),
        st.sampled_from(
            [
                "no_run",
                "bad_rank_dir",
                "stray_file",
                "part_is_dir",
                "empty_part",
                "run_is_dir",
                "table_is_file",
                "hidden_part",
                "symlink_loop",
                "unreadable",
                "huge_rank",
                "rank_leading_zero",
            ]
        ),
    ),
)
damages = st.builds(
    Damage, st.lists(mutation, min_size=1, max_size=3).map(tuple), st.sampled_from([False] * 7 + [True])
)


def _rewrite(path: Path, table: pa.Table, metadata: dict | None) -> None:
    path.unlink()
    pq.write_table(table.replace_schema_metadata(metadata), path)


def apply(damage: Damage, run: Path) -> bool:
    """Damage the copy `run`; returns whether the run is now certainly invalid (a reader must refuse it or
    validation must report it): known for one mutation (a later one may repair an earlier one)."""
    invalid = [_apply(m, run) for m in damage.mutations]
    return len(invalid) == 1 and invalid[0]


def _apply(mutation: Mutation, run: Path) -> bool:
    name, rel = base_files()[mutation.file % len(base_files())]
    path = run / rel
    kind, p = mutation.kind, mutation.params
    if kind == "layout":
        return _layout(run, path, name, p)
    if path.is_symlink() or not path.is_file():
        return False  # an earlier mutation removed the file
    if kind == "bytes":
        data = bytearray(path.read_bytes())
        if not data:
            return False
        for from_end, offset, value in p:
            i = (len(data) - 1 - offset % 512) if from_end else offset % len(data)
            data[i] = value
        path.write_bytes(bytes(data))
        return False
    if kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * p)])
        return int(len(data) * p) < len(data)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError):
        return False  # an earlier mutation damaged the file
    metadata = dict(table.schema.metadata or {})
    if kind == "columns":
        op, index, type_, new_name = p
        column = table.column_names[index % table.num_columns]
        if op == "drop":
            table = table.drop_columns([column])
        elif op == "rename":
            if new_name == column:
                return False
            table = table.rename_columns([new_name if c == column else c for c in table.column_names])
        elif op == "retype":
            old = table.schema.field(column).type
            if old == type_:
                return False
            try:
                array = table.column(column).cast(type_)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                array = pa.nulls(table.num_rows, type_)
            table = table.set_column(table.column_names.index(column), pa.field(column, type_), array)
        else:
            if new_name in table.column_names:
                return False
            table = table.append_column(new_name, pa.nulls(table.num_rows, type_))
        _rewrite(path, table, metadata)
        return True
    if kind == "older_minor":  # as an older minor wrote it: without some of the nullable columns
        nullable = [c.name for c in TABLES[name].columns if c.nullable and c.name in table.column_names]
        table = table.drop_columns(sorted({nullable[i % len(nullable)] for i in p}) if nullable else [])
        _rewrite(path, table, {**metadata, VERSION_KEY: b"1.0.0"})
        return False
    if kind == "metadata":
        version, table_name = p
        for key, value in ((VERSION_KEY, version), (TABLE_KEY, table_name)):
            if value is None:
                metadata.pop(key, None)
            else:
                metadata[key] = value.encode()
        _rewrite(path, table, metadata)
        return (
            version is None
            or table_name is None
            or table_name != name
            or not version.isascii()
            or version.split(".")[0] != SPEC_VERSION.split(".")[0]
        )
    return _rows(path, name, table, metadata, p)


def _rows(path: Path, name: str, table: pa.Table, metadata: dict, p: tuple) -> bool:
    op, index, value = p
    spec = TABLES[name]
    columns = [c for c in spec.columns if c.name in table.column_names]
    if table.num_rows == 0:
        return False
    row = index % table.num_rows

    def set_value(column: str, v) -> pa.Table:
        array = table.column(column).to_pylist()
        array[row] = v
        i = table.column_names.index(column)
        return table.set_column(i, table.schema.field(i), pa.array(array, table.schema.field(i).type))

    if op == "null":
        required = [c for c in columns if not c.nullable]
        if not required:
            return False
        c = required[index % len(required)]
        array = table.column(c.name).to_pylist()
        array[row] = None
        i = table.column_names.index(c.name)
        # written as nullable: a file that claims a required column may hold nulls
        table = table.set_column(
            i, pa.field(c.name, table.schema.field(i).type), pa.array(array, table.schema.field(i).type)
        )
    elif op == "negative":
        bounded = [c for c in columns if c.minimum is not None]
        if not bounded:
            return False
        c = bounded[index % len(bounded)]
        table = set_value(c.name, c.minimum - 1 - value % (1 << 30))
    elif op == "not_allowed":
        enums = [c for c in columns if c.allowed]
        if not enums:
            return False
        table = set_value(enums[index % len(enums)].name, f"not-allowed-{value}")
    elif op == "dangling":
        refs = [c for t, c in REFERENCES if t == name]
        if not refs:
            return False
        column = refs[index % len(refs)]
        dangling = f"missing-{value}" if column == "comm_id" else (1 << 50) + value
        table = set_value(column, dangling)
    elif op == "duplicate":
        if not spec.unique or table.num_rows < 1:
            return False
        table = pa.concat_tables([table, table.slice(row, 1)])
    elif op == "empty":
        table = table.slice(0, 0)
        _rewrite(path, table, metadata)
        return name == "run"
    elif op == "extra_run_row":
        if name != "run":
            return False
        table = pa.concat_tables([table, table])
    _rewrite(path, table, metadata)
    return True


def _layout(run: Path, path: Path, name: str, op: str) -> bool:
    if op == "no_run":
        if (run / "run.parquet").is_file():
            (run / "run.parquet").unlink()
    elif op == "bad_rank_dir":
        (run / "ops" / "rank=x").mkdir(parents=True, exist_ok=True)
    elif op == "stray_file":
        if path.parent.is_dir():
            (path.parent / "notes.txt").write_text("hello")
        return False
    elif name == "run" and op in ("part_is_dir", "empty_part") or not path.parent.is_dir():
        return False
    elif op == "part_is_dir":
        (path.parent / "part-00077.parquet").mkdir(exist_ok=True)
    elif op == "empty_part":
        (path.parent / "part-00078.parquet").write_bytes(b"")
    elif op == "run_is_dir":
        if (run / "run.parquet").is_file():
            (run / "run.parquet").unlink()
        (run / "run.parquet").mkdir(exist_ok=True)
    elif op == "table_is_file":
        if (run / "kernels").is_dir():
            shutil.rmtree(run / "kernels")
        (run / "kernels").write_text("not a directory")
    elif op == "hidden_part":
        (path.parent / f".{path.name}.tmp").write_bytes(b"half a file")
        return False
    elif op == "symlink_loop":
        loop = run / "ops" / "rank=5"
        if not loop.is_symlink() and (run / "ops").is_dir():
            loop.symlink_to(loop)
    elif op in ("huge_rank", "rank_leading_zero"):
        ranks = sorted((run / "ops").glob("rank=*")) if (run / "ops").is_dir() else []
        if not ranks or ranks[0].is_symlink():
            return False
        ranks[0].rename(run / "ops" / ("rank=4294967296" if op == "huge_rank" else "rank=00"))
        return op == "huge_rank"
    elif op == "unreadable":
        if path.exists():
            path.chmod(0)
        return os.geteuid() != 0
    return True


def _same_as_base(run: Path) -> bool:
    return all(Run(run).table(name).equals(base_tables()[name]) for name in TABLES)


def check(damage: Damage) -> None:
    with tempfile.TemporaryDirectory(prefix="maya-fuzz-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(base_run(), run, symlinks=True)
        try:
            invalid = apply(damage, run)
            try:
                problems = validate_run(run)
            except Exception as e:
                raise Undocumented(f"validate_run raised {type(e).__name__}: {e}") from e
            for p in problems:
                if not p.problem.strip() or not p.path:
                    raise Undocumented(f"a problem without a path or a description: {p!r}")
            if damage.cli:
                _cli(run, problems)
            if problems:
                return
            if invalid:
                raise Corrupt("validation passed a run the mutation made invalid")
            if all(m.kind == "bytes" for m in damage.mutations) and not _same_as_base(run):
                raise Corrupt("a damaged run validated and read back different data")
        finally:
            for p in run.rglob("*"):
                if not p.is_symlink():
                    p.chmod(0o700)
    # reading refuses what validation refuses, with a TraceError (the surface's documented error)


def check_read(damage: Damage) -> None:
    """`Run` and `read_table` of every table: the data, or a `TraceError`."""
    with tempfile.TemporaryDirectory(prefix="maya-fuzz-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(base_run(), run, symlinks=True)
        try:
            invalid = apply(damage, run)
            opened = Run(run)
            tables = {name: opened.table(name) for name in TABLES}
            for name, t in tables.items():
                if t.schema != base_tables()[name].schema:
                    raise Corrupt(f"table {name} read with schema {t.schema}")
                nulls = [f.name for f in t.schema if not f.nullable and t.column(f.name).null_count]
                if nulls:
                    raise Corrupt(f"table {name} read with nulls in required column(s) {nulls}")
            if invalid and damage.mutations[0].kind in ("columns", "metadata", "truncate"):
                raise Corrupt("a file the mutation made unreadable was read")
        finally:
            for p in run.rglob("*"):
                if not p.is_symlink():
                    p.chmod(0o700)


def _cli(run: Path, problems: list) -> None:
    from typer.testing import CliRunner

    from maya.cli import app

    r = CliRunner().invoke(app, ["trace", "check", str(run)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise Undocumented(f"maya trace check raised {type(r.exception).__name__}: {r.exception}")
    # a run emptied by the damage (or marked running) is valid but not a whole capture: the command says so
    if r.exit_code != (1 if problems or incomplete(run) else 0) or "Traceback" in r.output:
        raise Undocumented(f"maya trace check exited {r.exit_code}: {r.output[-500:]}")


def surfaces() -> list[Surface]:
    return [
        Surface("trace validate", damages, check, errors=()),
        Surface(
            "trace read",
            damages,
            check_read,
            errors=(TraceError,),
            describe=lambda e: f"{e}" if isinstance(e, TraceError) and e.path else "",
        ),
    ]
