"""Reading and writing trace runs: a directory of Parquet tables, per-rank tables hive-partitioned.

Layout of a run directory::

    run.parquet                          one row (table `run`)
    api_calls/rank=0/part-00000.parquet  per-rank tables, one or more parts per rank
    ops/rank=0/part-00000.parquet
    ...

Every file carries the spec version and its table name in the Parquet key-value metadata.
Files are written to a hidden temporary name and renamed into place, so a crash never leaves a
half-written file under a name that readers pick up.
"""
from __future__ import annotations

import inspect
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from . import migrations
from .columns import SPEC_VERSION, TABLES
from .errors import TraceCorruptError, TraceError, TraceSchemaError, TraceVersionError
from .schema import TABLE_KEY, VERSION_KEY, arrow_schema, empty_table, file_schema

ROW_GROUP_ROWS = 256 * 1024
"""Rows per Parquet row group: large enough for DuckDB's parallel scans, small enough to stream."""

_PART_RE = re.compile(r"^part-(\d{5,})\.parquet$")
_RANK_RE = re.compile(r"^rank=(\d+)$")
CURRENT_MAJOR = int(SPEC_VERSION.split(".")[0])
CURRENT_MINOR = int(SPEC_VERSION.split(".")[1])


# ---------------------------------------------------------------- writing

def conform(name: str, data: pa.Table | Mapping[str, Iterable], *, with_rank: bool = False) -> pa.Table:
    """Return `data` as a table of exactly the schema of table `name`.

    Missing nullable columns are filled with nulls; unknown columns, missing required columns and
    values that do not convert losslessly raise `TraceSchemaError`.
    """
    schema = arrow_schema(name) if with_rank else file_schema(name)
    table = data if isinstance(data, pa.Table) else pa.table(dict(data))
    unknown = set(table.column_names) - set(schema.names)
    if unknown:
        raise TraceSchemaError(name, f"unknown column(s) {sorted(unknown)} for table {name!r}")
    arrays = []
    for fld in schema:
        if fld.name in table.column_names:
            col = table.column(fld.name)
            if col.type != fld.type:
                try:
                    col = col.cast(fld.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise TraceSchemaError(name, f"column {fld.name!r} of type {col.type} does not "
                                                 f"convert to {fld.type}: {e}") from None
            if not fld.nullable and col.null_count:
                raise TraceSchemaError(name, f"column {fld.name!r} is required but has "
                                             f"{col.null_count} null value(s)")
        else:
            if not fld.nullable:
                raise TraceSchemaError(name, f"required column {fld.name!r} is missing")
            col = pa.nulls(table.num_rows, fld.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


_KEYED = ("start_ns", "ts_ns", "correlation_id")
_PAGE_ROWS = ({"max_rows_per_page": ROW_GROUP_ROWS}
              if "max_rows_per_page" in inspect.signature(pq.ParquetWriter).parameters else {})
"""One data page per column chunk (up to the 1 MiB page size), where this pyarrow has the setting."""


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or (pa.types.is_list(t) and pa.types.is_string(t.value_type))


def _encoding_options(schema: pa.Schema) -> dict:
    """Per-column Parquet options, chosen for write speed at no cost in size.

    - Dictionary-encode only the strings drawn from a small set (required strings such as `api`
      and `name`, and enumerations): hashing every value of a sparse or free-form string costs
      more CPU than zstd takes to shrink it as plainly.
    - Delta-encode integers: sequence numbers, times and ids mostly grow.
    - Min/max statistics only on the columns rows are keyed or ordered by (the table's unique
      key, its time and `correlation_id`), the ones a range filter can prune row groups with.
    - One data page per column chunk: with Arrow's default of 20,000 rows per page, setting up a
      zstd context for each page took about as much write time (~6% in a profile) as compressing.
    """
    md = schema.metadata or {}
    spec = TABLES.get(md.get(TABLE_KEY, b"").decode())
    enums = {c.name for c in spec.columns if c.allowed} if spec else set()
    keyed = set(_KEYED) | set(spec.unique if spec else ())
    return {
        "use_dictionary": [f.name for f in schema
                           if _is_string(f.type) and (not f.nullable or f.name in enums)],
        "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)},
        "write_statistics": [f.name for f in schema if f.name in keyed],
        **_PAGE_ROWS,
    }


@contextmanager
def atomic_path(final: Path, *, replace: bool = True) -> Iterator[Path]:
    """Yield a hidden temporary path beside `final` to write; when the block ends without error,
    fsync that file and move it into place (`replace=False`: FileExistsError rather than
    overwrite). The temporary file is removed in every case."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, final)
        else:
            os.link(tmp, final)  # fails if `final` exists: never overwrites another writer's part
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(table: pa.Table, final: Path, *, replace: bool) -> Path:
    """Write `table` as a zstd Parquet file at `final`, atomically (see `atomic_path`)."""
    with atomic_path(final, replace=replace) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS,
                       **_encoding_options(table.schema))
    return final


class RunWriter:
    """Writes the tables of one run directory. One writer per rank process is safe."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, data: pa.Table | Mapping[str, Iterable], rank: int | None = None) -> Path:
        """Write rows of table `name` (a new part for per-rank tables; `run` is replaced whole)."""
        spec = TABLES.get(name)
        if spec is None:
            raise KeyError(f"unknown trace table {name!r}; tables are {sorted(TABLES)}")
        table = conform(name, data)
        if not spec.per_rank:
            if rank is not None:
                raise ValueError(f"table {name!r} is not per rank")
            return atomic_write(table, self.run_dir / f"{name}.parquet", replace=True)
        if rank is None or rank < 0:
            raise ValueError(f"table {name!r} is per rank: pass rank >= 0")
        rank_dir = self.run_dir / name / f"rank={rank}"
        index = _next_part_index(rank_dir)
        while True:
            try:
                return atomic_write(table, rank_dir / f"part-{index:05d}.parquet", replace=False)
            except FileExistsError:
                index += 1


def _next_part_index(rank_dir: Path) -> int:
    if not rank_dir.is_dir():
        return 0
    indices = [int(m.group(1)) for p in rank_dir.iterdir() if (m := _PART_RE.match(p.name))]
    return max(indices, default=-1) + 1


# ---------------------------------------------------------------- reading

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
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise TraceCorruptError(path, f"not a readable Parquet file (truncated or not Parquet): {e}") from None
    md = schema.metadata or {}
    if VERSION_KEY not in md or TABLE_KEY not in md:
        raise TraceSchemaError(path, "Parquet file without maya_trace_spec metadata: not a Maya trace table")
    version = md[VERSION_KEY].decode()
    table = md[TABLE_KEY].decode()
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise TraceVersionError(path, f"malformed spec version {version!r}")
    if expect_table is not None and table != expect_table:
        raise TraceSchemaError(path, f"holds table {table!r}, expected {expect_table!r}")
    if table not in TABLES:
        raise TraceSchemaError(path, f"unknown table {table!r}")
    info = FileInfo(path, table, version, meta.num_rows)
    if info.major > CURRENT_MAJOR:
        raise TraceVersionError(path, f"written with maya_trace_spec {version}, a newer major version "
                                      f"than this reader's {SPEC_VERSION}: upgrade Maya to read it")
    if info.major < CURRENT_MAJOR and not migrations.can_migrate(info.major, CURRENT_MAJOR):
        raise TraceVersionError(path, f"written with maya_trace_spec {version}; no migration from "
                                      f"major {info.major} to {CURRENT_MAJOR} is available")
    return info


def read_file(path: str | Path, expect_table: str | None = None) -> pa.Table:
    """Read one table file, migrated and conformed to the current spec (without `rank`)."""
    info = inspect_file(path, expect_table)
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise TraceCorruptError(path, f"damaged Parquet data: {e}") from None
    table = table.replace_schema_metadata(None)
    if info.major < CURRENT_MAJOR:
        table = migrations.migrate(info.table, table, info.major, CURRENT_MAJOR)
        return _conform_checked(path, info.table, table, newer_minor=False, older_minor=True)
    return _conform_checked(path, info.table, table, newer_minor=info.minor > CURRENT_MINOR,
                            older_minor=info.minor < CURRENT_MINOR)


def _conform_checked(path: Path, name: str, table: pa.Table, *, newer_minor: bool, older_minor: bool) -> pa.Table:
    expected = file_schema(name)
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
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=expected)


def table_files(run_dir: str | Path, name: str) -> list[tuple[int | None, Path]]:
    """(rank, path) of every committed file of table `name` in a run, in rank and part order."""
    run_dir = Path(run_dir)
    spec = TABLES[name]
    if not spec.per_rank:
        p = run_dir / f"{name}.parquet"
        return [(None, p)] if p.exists() else []
    base = run_dir / name
    if not base.is_dir():
        return []
    out = []
    for d in base.iterdir():
        if d.name.startswith("."):
            continue
        m = _RANK_RE.match(d.name)
        if not m or not d.is_dir():
            raise TraceError(d, "unexpected entry in a per-rank table directory (expected rank=N/)")
        parts = sorted((p for p in d.iterdir() if _PART_RE.match(p.name)), key=lambda p: p.name)
        out.extend((int(m.group(1)), p) for p in parts)
    return sorted(out, key=lambda rp: (rp[0], rp[1].name))


def read_table(run_dir: str | Path, name: str, ranks: Iterable[int] | None = None) -> pa.Table:
    """Read table `name` of a run (all ranks, or `ranks`), with the `rank` column for per-rank tables."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.parquet").exists():
        raise TraceError(run_dir, "not a Maya run directory (no run.parquet)")
    wanted = None if ranks is None else set(ranks)
    pieces = []
    for rank, path in table_files(run_dir, name):
        if wanted is not None and rank not in wanted:
            continue
        t = read_file(path, expect_table=name)
        if rank is not None:
            t = t.add_column(0, pa.field("rank", pa.int32(), nullable=False),
                             pa.repeat(pa.scalar(rank, pa.int32()), t.num_rows))
        pieces.append(t.cast(arrow_schema(name)))
    if not pieces:
        return empty_table(name)
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
        return sorted({r for name, spec in TABLES.items() if spec.per_rank
                       for r, _ in table_files(self.path, name)})

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
