"""Row-level validation of a run with pandera, derived from `columns.TABLES`, plus cross-table checks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandera.pandas as pa
import pyarrow.parquet as pq

from .children import working
from .columns import TABLES
from .errors import TraceError
from .layout import table_files
from .reader import Run, read_file


@dataclass(frozen=True)
class Problem:
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@cache
def dataframe_schema(name: str) -> pa.DataFrameSchema:
    """The pandera schema of one file of table `name` (per-rank files have no `rank` column)."""
    table = TABLES[name]
    columns = {}
    for c in table.columns:
        if table.per_rank and c.name == "rank":
            continue
        checks = []
        if c.minimum is not None:
            checks.append(pa.Check.ge(c.minimum))
        if c.allowed is not None:
            checks.append(pa.Check.isin(list(c.allowed)))
        columns[c.name] = pa.Column(nullable=c.nullable, checks=checks, required=True, coerce=False)
    return pa.DataFrameSchema(columns, strict=True, name=name)


def validate_file(path: Path, name: str) -> list[Problem]:
    try:
        table = read_file(path, expect_table=name)
    except TraceError as e:
        return [Problem(e.path, e.problem)]
    df = table.to_pandas(types_mapper=_nullable_types)
    try:
        dataframe_schema(name).validate(df, lazy=True)
    except pa.errors.SchemaErrors as e:
        return [Problem(str(path), _describe(row)) for _, row in e.failure_cases.head(20).iterrows()]
    return []


def _nullable_types(arrow_type):
    import pandas as pd
    import pyarrow as pyarrow

    if pyarrow.types.is_integer(arrow_type) or pyarrow.types.is_boolean(arrow_type):
        return pd.ArrowDtype(arrow_type)
    return None


def _describe(row) -> str:
    where = f"column {row['column']!r}" if row.get("column") is not None else "table"
    at = f" (row {int(row['index'])})" if row.get("index") is not None and row["index"] == row["index"] else ""
    return f"{where}: check {row['check']} failed for value {row['failure_case']!r}{at}"


def validate_run(path: str | Path) -> list[Problem]:
    """Every problem found in a run directory: file identity, schema, row checks, references."""
    path = Path(path)
    try:
        run = Run(path)
    except TraceError as e:
        return [Problem(e.path, e.problem)]
    problems: list[Problem] = []
    for name in TABLES:
        try:
            files = table_files(path, name)
        except TraceError as e:
            problems.append(Problem(e.path, e.problem))
            continue
        for _, f in files:
            problems.extend(validate_file(f, name))
    if not problems:
        problems.extend(_reference_problems(run))
    return problems


def incomplete(path: str | Path) -> str | None:
    """Why a run does not hold a whole capture, whatever its schema: a stop signal interrupted it, its producer
    is still running or was killed (status `running`), or it holds no call; None when none of these."""
    run = Run(path)
    status = run.info["status"]
    calls = sum(pq.ParquetFile(f).metadata.num_rows for _, f in table_files(run.path, "api_calls"))
    held = f"{calls:,} calls of {len(run.ranks)} rank(s)" if calls else "no call"
    if status == "interrupted":
        by = _attrs(run).get("interrupted_by")
        return f"interrupted{f' by {by}' if by else ''}: it holds what was captured until then ({held})"
    if status == "running":
        return f"its capture never finished (status running: the producer is still running or was killed); {held}"
    if not calls:
        return f"it is empty (status {status}): no call was captured"
    return None


def unheld_work(path: str | Path) -> str | None:
    """Work the run's program did that the run does not hold, though its capture is whole: processes its ranks
    started made device calls (attrs `child_processes`: an Inductor autotuning subprocess, an evaluation process);
    None when none did."""
    found = [c["device_calls"] for reports in working(_attrs(Run(path))).values() for c in reports]
    if not found:
        return None
    return (
        f"{len(found)} process(es) its ranks started made {sum(found):,} device call(s) it does not hold "
        "(attrs child_processes): that work is not priced"
    )


def _attrs(run: Run) -> dict:
    """The run's attrs, {} when they are not a JSON object."""
    try:
        attrs = json.loads(run.info["attrs"] or "{}")
    except (json.JSONDecodeError, TypeError):
        return {}
    return attrs if isinstance(attrs, dict) else {}


def _reference_problems(run: Run) -> list[Problem]:
    """Ids that point at rows which do not exist (same rank)."""
    import duckdb

    from .duck import register_run

    checks = [
        ("api_calls", "kernel_id", "kernels", "kernel_id"),
        ("api_calls", "op_id", "ops", "op_id"),
        ("api_calls", "comm_id", "communicators", "comm_id"),
        ("memory_events", "op_id", "ops", "op_id"),
        ("ops", "parent_op_id", "ops", "op_id"),
    ]
    con = duckdb.connect()
    register_run(con, run.path, validate=False)
    out = []
    for src, col, dst, key in checks:
        n, example = con.execute(
            f"SELECT count(*), any_value(s.{col}) FROM {src} s ANTI JOIN {dst} d "
            f"ON s.rank = d.rank AND s.{col} = d.{key} WHERE s.{col} IS NOT NULL"
        ).fetchone()
        if n:
            out.append(
                Problem(str(run.path / src), f"{n} row(s) reference a missing {dst}.{key} (e.g. {col}={example!r})")
            )
    for name in TABLES:
        spec = TABLES[name]
        if spec.per_rank and len(spec.unique) == 1:
            key = spec.unique[0]
            n = con.execute(
                f"SELECT count(*) FROM (SELECT rank, {key} FROM {name} GROUP BY ALL HAVING count(*) > 1)"
            ).fetchone()[0]
            if n:
                out.append(Problem(str(run.path / name), f"{n} duplicate {key} value(s) within a rank"))
    con.close()
    return out
