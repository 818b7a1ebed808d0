"""`maya sql`: read-only SQL over the warehouse and, with --trace, a run's tables."""

from __future__ import annotations

import csv
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from maya_trace_spec import TraceError

from .common import WAREHOUSE, fail, out


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


def sql_cmd(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="SQL (read-only: SELECT, SHOW, DESCRIBE, EXPLAIN).")],
    trace: Annotated[Path | None, typer.Option(help="Run directory whose tables become views.")] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout (--format json).")] = False,
    warehouse: WAREHOUSE = None,
):
    """Query the warehouse and a run's tables with read-only SQL.

    The warehouse's tables (runs, predictions, estimator_versions, validation_rows, search_points, ...)
    and, with --trace, the run's tables as views (api_calls, ops, kernels, ...).
    """
    if as_json:
        if format not in (Format.table, Format.json):
            fail(f"--json prints JSON: give it or --format {format.value}, not both", 2)
        format = Format.json
    from maya.core.sql import QueryRefused, run_query

    try:
        result = run_query(query, trace=trace, warehouse=warehouse)
    except QueryRefused as e:
        fail(str(e), 2)
    except TraceError as e:
        fail(str(e))
    except Exception as e:  # DuckDB binder/parser/runtime errors: the user's SQL
        fail(f"query failed: {str(e).strip()}")
    if format is Format.json:
        sys.stdout.write(json.dumps([dict(zip(result.columns, r)) for r in result.rows], default=str) + "\n")
    elif format is Format.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(result.columns)
        w.writerows(result.rows)
    elif format is Format.markdown:
        from tabulate import tabulate

        rows = [[v.replace("|", "\\|") if isinstance(v, str) else v for v in row] for row in result.rows]
        sys.stdout.write(tabulate(rows, headers=result.columns, tablefmt="github", missingval="NULL") + "\n")
    else:
        table = Table(*result.columns, show_lines=False)
        for row in result.rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        out.print(table)
        out.print(f"{len(result.rows)} row(s)", style="dim")
