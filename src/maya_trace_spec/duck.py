"""DuckDB views over a run directory: `api_calls`, `kernels`, ... queryable by name."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .columns import TABLES
from .layout import table_files
from .reader import inspect_file
from .schema import empty_table


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def register_run(con, run_dir: str | Path, *, validate: bool = True, prefix: str = "") -> list[str]:
    """Create a temporary view per table of the run on DuckDB connection `con`.

    With `validate`, every file's footer is checked first (identity, version), so a view never
    silently reads a foreign or newer-major file. Tables with no files become empty views of the
    right types; a column no file of a table holds (files of an older minor version) reads as NULL.
    Returns the view names.
    """
    import pyarrow.parquet as pq

    run_dir = Path(run_dir).resolve()
    names = []
    for name, spec in TABLES.items():
        files = [path for _, path in table_files(run_dir, name)]
        if validate:
            for f in files:
                inspect_file(f, expect_table=name)
        view = f"{prefix}{name}"
        if not files:
            con.register(f"_maya_empty_{view}", empty_table(name))
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT * FROM "_maya_empty_{view}"')
            names.append(view)
            continue
        present = {n for f in files for n in pq.read_schema(f).names}
        cols = ", ".join(
            f'"{c.name}"'
            if c.name in present or (spec.per_rank and c.name == "rank")
            else f'CAST(NULL AS {_duckdb_type(c.type)}) AS "{c.name}"'
            for c in spec.columns
        )
        listed = "[" + ", ".join(_sql_str(str(f)) for f in files) + "]"
        hive = ", hive_partitioning = true, hive_types = {'rank': INTEGER}" if spec.per_rank else ""
        con.execute(
            f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT {cols} FROM read_parquet('
            f"{listed}, union_by_name = true{hive})"
        )
        names.append(view)
    return names


_DUCKDB_TYPES = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}


def _duckdb_type(t: pa.DataType) -> str:
    """DuckDB's name of a column type of the spec."""
    if pa.types.is_list(t):
        return _duckdb_type(t.value_type) + "[]"
    return _DUCKDB_TYPES[t]
