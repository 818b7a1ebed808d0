"""pyarrow schemas derived from `columns.TABLES`, with the spec version in their metadata."""

from __future__ import annotations

import pyarrow as pa

from .columns import SPEC_VERSION, TABLES, Table

VERSION_KEY = b"maya_trace_spec.version"
TABLE_KEY = b"maya_trace_spec.table"


def _table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown trace table {name!r}; tables are {sorted(TABLES)}") from None


def arrow_schema(name: str) -> pa.Schema:
    """The full logical schema of a table (including the `rank` partition column)."""
    t = _table(name)
    fields = [pa.field(c.name, c.type, nullable=c.nullable) for c in t.columns]
    return pa.schema(fields, metadata={VERSION_KEY: SPEC_VERSION.encode(), TABLE_KEY: name.encode()})


def file_schema(name: str) -> pa.Schema:
    """The schema stored in each Parquet file: per-rank tables keep `rank` in the directory name."""
    schema = arrow_schema(name)
    if _table(name).per_rank:
        schema = schema.remove(schema.get_field_index("rank"))
    return schema


def empty_table(name: str) -> pa.Table:
    return arrow_schema(name).empty_table()
