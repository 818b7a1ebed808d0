"""DuckDB views over a run directory: `api_calls`, `kernels`, ... queryable by name."""
from __future__ import annotations

from pathlib import Path

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
    right types. Returns the view names.
    """
    run_dir = Path(run_dir).resolve()
    names = []
    for name, spec in TABLES.items():
        files = table_files(run_dir, name)
        if validate:
            for _, f in files:
                inspect_file(f, expect_table=name)
        view = f"{prefix}{name}"
        cols = ", ".join(f'"{c}"' for c in spec.column_names)
        if not files:
            con.register(f"_maya_empty_{view}", empty_table(name))
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT * FROM "_maya_empty_{view}"')
        elif spec.per_rank:
            pattern = _sql_str(str(run_dir / name / "rank=*" / "part-*.parquet"))
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT {cols} FROM read_parquet('
                        f"{pattern}, hive_partitioning = true, hive_types = {{'rank': INTEGER}})")
        else:
            con.execute(f'CREATE OR REPLACE TEMP VIEW "{view}" AS SELECT {cols} FROM '
                        f"read_parquet({_sql_str(str(files[0][1]))})")
        names.append(view)
    return names
