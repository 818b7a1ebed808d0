"""Reading trace runs: each file's identity and version checked, older versions migrated (an older minor's
changed meanings included), every table conformed to the current spec (or only the columns asked for);
`migrate_run` rewrites a run's older files in place."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import migrations
from .columns import SPEC_VERSION, TABLES
from .errors import TraceCorruptError, TraceError, TraceSchemaError, TraceVersionError
from .layout import table_files
from .schema import TABLE_KEY, VERSION_KEY, arrow_schema, file_schema
from .writer import atomic_write

CURRENT_MAJOR = int(SPEC_VERSION.split(".")[0])
CURRENT_MINOR = int(SPEC_VERSION.split(".")[1])


@dataclass(frozen=True)
class FileInfo:
    path: Path
    table: str
    version: str
    num_rows: int

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])


def inspect_file(path: str | Path, expect_table: str | None = None) -> FileInfo:
    """Read a file's footer and check its identity and version; raises a `TraceError` naming it."""
    path = Path(path)
    try:
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except (pa.ArrowException, OSError) as e:
        raise TraceCorruptError(path, f"not a readable Parquet file (truncated or not Parquet): {e}") from None
    md = schema.metadata or {}
    if VERSION_KEY not in md or TABLE_KEY not in md:
        raise TraceSchemaError(path, "Parquet file without maya_trace_spec metadata: not a Maya trace table")
    try:
        version, table = md[VERSION_KEY].decode(), md[TABLE_KEY].decode()
    except UnicodeDecodeError:
        raise TraceSchemaError(path, "maya_trace_spec metadata that is not UTF-8 text: a damaged file") from None
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise TraceVersionError(path, f"malformed spec version {version!r}")
    if expect_table is not None and table != expect_table:
        raise TraceSchemaError(path, f"holds table {table!r}, expected {expect_table!r}")
    if table not in TABLES:
        raise TraceSchemaError(path, f"unknown table {table!r}")
    info = FileInfo(path, table, version, meta.num_rows)
    if info.major > CURRENT_MAJOR:
        raise TraceVersionError(
            path,
            f"written with maya_trace_spec {version}, a newer major version "
            f"than this reader's {SPEC_VERSION}: upgrade Maya to read it",
        )
    if info.major < CURRENT_MAJOR and not migrations.can_migrate(info.major, CURRENT_MAJOR):
        raise TraceVersionError(
            path,
            f"written with maya_trace_spec {version}; no migration from "
            f"major {info.major} to {CURRENT_MAJOR} is available",
        )
    return info


def read_file(path: str | Path, expect_table: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
    """Read one table file, migrated and conformed to the current spec (without `rank`); with `columns` (names of
    the table's spec, `_projection`), only those, in that order (read alone from a file of the current version,
    whose other columns are then not checked)."""
    info = inspect_file(path, expect_table)
    current = info.major == CURRENT_MAJOR and info.minor == CURRENT_MINOR
    expected = file_schema(info.table)
    if columns is not None:
        columns = _projection(path, info.table, columns, expected.names)
    try:
        read = None  # every column; those asked of a current file that it holds (`_conform_checked` names the others)
        if current and columns is not None:
            held = set(pq.read_schema(path).names)
            read = [c for c in columns if c in held]
        # partitioning=None: pyarrow 19 (as in an llm-foundry environment) infers a `rank` column from the `rank=N`
        # directory of the path (hive partitioning), which no trace file holds
        table = pq.read_table(
            path,
            columns=read,
            partitioning=None,
            page_checksum_verification=True,
        )
    except (pa.ArrowException, OSError) as e:
        raise TraceCorruptError(path, f"damaged Parquet data: {e}") from None
    if table.num_rows != info.num_rows:
        raise TraceCorruptError(
            path, f"damaged Parquet footer: it counts {info.num_rows} rows, its row groups {table.num_rows}"
        )
    if table.num_columns:  # pyarrow (26) drops the rows of a table without columns whose metadata it replaces
        table = table.replace_schema_metadata(None)
    if current and columns is not None:
        return _conform_checked(path, info.table, table, pa.schema([expected.field(c) for c in columns]))
    if info.major < CURRENT_MAJOR:
        table = migrations.migrate(info.table, table, info.major, CURRENT_MAJOR)
        table = _conform_checked(path, info.table, table, expected, newer_minor=False, older_minor=True)
    else:
        table = _conform_checked(
            path,
            info.table,
            table,
            expected,
            newer_minor=info.minor > CURRENT_MINOR,
            older_minor=info.minor < CURRENT_MINOR,
        )
        table = migrations.upgrade_minor(info.table, table, info.minor)
    return table if columns is None else table.select(columns)


def _projection(path: str | Path, name: str, columns: Sequence[str], names: Sequence[str]) -> list[str]:
    """`columns` asked of table `name`, each once: TypeError for a str, TraceSchemaError naming those not in
    `names` (the table's spec)."""
    if isinstance(columns, str):
        raise TypeError(f"columns must be a sequence of column names, not the str {columns!r}")
    wanted = list(dict.fromkeys(columns))
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise TraceSchemaError(path, f"unknown column(s) {unknown} asked of table {name!r}")
    return wanted


def _conform_checked(
    path: Path, name: str, table: pa.Table, expected: pa.Schema, *, newer_minor: bool = False, older_minor: bool = False
) -> pa.Table:
    extra = [c for c in table.column_names if c not in expected.names]
    if extra and not newer_minor:
        raise TraceSchemaError(path, f"unexpected column(s) {extra}")
    arrays = []
    for fld in expected:
        if fld.name not in table.column_names:
            if older_minor and fld.nullable:
                arrays.append(pa.nulls(table.num_rows, fld.type))
                continue
            raise TraceSchemaError(path, f"missing column {fld.name!r} ({fld.type})")
        col = table.column(fld.name)
        if col.type != fld.type:
            raise TraceSchemaError(path, f"column {fld.name!r} has type {col.type}, expected {fld.type}")
        if not fld.nullable and col.null_count:
            raise TraceSchemaError(path, f"required column {fld.name!r} holds {col.null_count} null value(s)")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=expected) if arrays else table.select([])  # no column: rows kept


def read_table(
    run_dir: str | Path, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """Read table `name` of a run (all ranks, or `ranks`), with the `rank` column for per-rank tables; with
    `columns` (a sequence of the table's column names), only those (`read_file`), after `rank`."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.parquet").exists():
        raise TraceError(run_dir, "not a Maya run directory (no run.parquet)")
    wanted = None if ranks is None else set(ranks)
    schema = arrow_schema(name)
    if columns is not None:
        columns = [c for c in _projection(run_dir, name, columns, schema.names) if c != "rank"]
        kept = [c for c in ("rank", *columns) if c in schema.names]
        schema = pa.schema([schema.field(c) for c in kept], metadata=schema.metadata)
    pieces = []
    for rank, path in table_files(run_dir, name):
        if wanted is not None and rank not in wanted:
            continue
        t = read_file(path, expect_table=name, columns=columns)
        if rank is not None:
            t = t.add_column(
                0, pa.field("rank", pa.int32(), nullable=False), pa.repeat(pa.scalar(rank, pa.int32()), t.num_rows)
            )
        pieces.append(t.cast(schema))
    if not pieces:
        return schema.empty_table()
    return pa.concat_tables(pieces)


class Run:
    """A run directory opened for reading."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise TraceError(self.path, "no such run directory")
        run = read_table(self.path, "run")
        if run.num_rows != 1:
            raise TraceSchemaError(self.path / "run.parquet", f"expected exactly one row, found {run.num_rows}")
        self.info: dict = run.to_pylist()[0]

    @property
    def ranks(self) -> list[int]:
        return sorted({r for name, spec in TABLES.items() if spec.per_rank for r, _ in table_files(self.path, name)})

    def table(self, name: str, ranks: Iterable[int] | None = None) -> pa.Table:
        return read_table(self.path, name, ranks)

    def files(self) -> list[tuple[str, int | None, Path]]:
        return [(name, r, p) for name in TABLES for r, p in table_files(self.path, name)]


def migrate_run(run_dir: str | Path) -> int:
    """Rewrite every file of an older major in the current version, each atomically. Returns the count."""
    count = 0
    for name in TABLES:
        for _, path in table_files(run_dir, name):
            if inspect_file(path, expect_table=name).major < CURRENT_MAJOR:
                atomic_write(read_file(path, expect_table=name), path, replace=True)
                count += 1
    return count
