"""Writing trace runs: tables conformed to the spec, written as zstd Parquet files that appear
atomically (a hidden temporary name renamed into place), so a crash never leaves a half-written file
under a name that readers pick up. Every file carries the spec version and its table name in the
Parquet key-value metadata."""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .columns import TABLES
from .errors import TraceSchemaError
from .layout import next_part_index, part_path, rank_dir, whole_table_path
from .schema import TABLE_KEY, arrow_schema, file_schema

ROW_GROUP_ROWS = 256 * 1024
"""Rows per Parquet row group: large enough for DuckDB's parallel scans, small enough to stream."""


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
                    raise TraceSchemaError(
                        name, f"column {fld.name!r} of type {col.type} does not convert to {fld.type}: {e}"
                    ) from None
            if not fld.nullable and col.null_count:
                raise TraceSchemaError(name, f"column {fld.name!r} is required but has {col.null_count} null value(s)")
        else:
            if not fld.nullable:
                raise TraceSchemaError(name, f"required column {fld.name!r} is missing")
            col = pa.nulls(table.num_rows, fld.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


_KEYED = ("start_ns", "ts_ns", "correlation_id")
_PAGE_ROWS = (
    {"max_rows_per_page": ROW_GROUP_ROWS}
    if "max_rows_per_page" in inspect.signature(pq.ParquetWriter).parameters
    else {}
)
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
        "use_dictionary": [f.name for f in schema if _is_string(f.type) and (not f.nullable or f.name in enums)],
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
        pq.write_table(
            table,
            tmp,
            compression="zstd",
            row_group_size=ROW_GROUP_ROWS,
            write_page_checksum=True,
            **_encoding_options(table.schema),
        )
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
            return atomic_write(table, whole_table_path(self.run_dir, name), replace=True)
        if rank is None or rank < 0:
            raise ValueError(f"table {name!r} is per rank: pass rank >= 0")
        folder = rank_dir(self.run_dir, name, rank)
        index = next_part_index(folder)
        while True:
            try:
                return atomic_write(table, part_path(folder, index), replace=False)
            except FileExistsError:
                index += 1
