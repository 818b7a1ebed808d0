"""The `maya` command line."""
from __future__ import annotations

import csv
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from maya_trace_spec import TraceError

from maya import __version__
from .estimators import estimators_app

app = typer.Typer(help="Maya: predict training time, memory and cost on virtual GPUs.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
trace_app = typer.Typer(help="Validate, import, export and migrate maya_trace_spec runs.", no_args_is_help=True)
import_app = typer.Typer(help="Import traces from other tools.", no_args_is_help=True)
profile_app = typer.Typer(help="Profile real devices with torch.profiler.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
trace_app.add_typer(import_app, name="import")
app.add_typer(profile_app, name="profile")
app.add_typer(estimators_app, name="estimators")

from .common import err, fail, out, script_argv  # noqa: E402
from .emulate import emulate_cmd  # noqa: E402
from .predict import predict_cmd  # noqa: E402
from .search import search_cmd  # noqa: E402
from .dashboard import dashboard_cmd  # noqa: E402

app.command("emulate", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(emulate_cmd)
app.command("predict")(predict_cmd)
app.command("dashboard")(dashboard_cmd)
app.command("search", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(search_cmd)


def _version(value: bool) -> None:
    if value:
        out.print(f"maya {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                         help="Print the version and exit.")] = None):
    """Maya: how fast, how much memory, how much money, and which configuration is best."""


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def sql(query: Annotated[str, typer.Argument(help="SQL (read-only: SELECT, SHOW, DESCRIBE, EXPLAIN).")],
        trace: Annotated[Optional[Path], typer.Option(help="Run directory whose tables become views.")] = None,
        format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
        warehouse: Annotated[Optional[Path], typer.Option(help="Warehouse file (default $MAYA_WAREHOUSE "
                                                                "or $MAYA_HOME/warehouse.duckdb).")] = None):
    """Query the warehouse and, with --trace, a run's tables (api_calls, ops, kernels, ...)."""
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
    else:
        table = Table(*result.columns, show_lines=False)
        for row in result.rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        out.print(table)
        out.print(f"{len(result.rows)} row(s)", style="dim")


@trace_app.command("validate")
def trace_validate(path: Annotated[Path, typer.Argument(help="Run directory or one table file.")]):
    """Check a run against the spec: file identity and version, columns and types, row constraints,
    references between tables."""
    from maya_trace_spec.validation import validate_file, validate_run
    from maya_trace_spec import inspect_file

    if path.is_file():
        try:
            problems = validate_file(path, inspect_file(path).table)
        except TraceError as e:
            fail(str(e))
    elif path.is_dir():
        problems = validate_run(path)
    else:
        fail(f"{path}: no such file or directory")
    if problems:
        for p in problems:
            err.print(f"[red]✗[/] {p}", highlight=False)
        fail(f"{len(problems)} problem(s) found")
    out.print(f"[green]✓[/] {path} is a valid maya_trace_spec trace")


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    chakra = "chakra"


@trace_app.command("export")
def trace_export(path: Annotated[Path, typer.Argument(help="Run directory.")],
                 format: Annotated[ExportFormat, typer.Option("--format", "-f")] = ExportFormat.perfetto,
                 out_path: Annotated[Optional[Path], typer.Option("--out", "-o", help="Output file (perfetto) "
                                                                   "or prefix (chakra).")] = None):
    """Export a run as a Perfetto/Chrome timeline (one process per rank, one track per stream) or as
    Chakra execution traces (one file per rank)."""
    try:
        if format is ExportFormat.perfetto:
            from maya_trace_spec.interop.perfetto import export_perfetto
            target = out_path or path.with_name(path.name + ".perfetto.json")
            stats = export_perfetto(path, target)
            out.print(f"wrote {target} ({stats.slices} slices); open it in https://ui.perfetto.dev")
        else:
            from maya_trace_spec.interop.chakra import export_chakra
            files = export_chakra(path, out_path or path.with_name(path.name + ".chakra"))
            out.print(f"wrote {len(files)} Chakra ET file(s): {', '.join(map(str, files))}")
    except TraceError as e:
        fail(str(e))


@import_app.command("kineto")
def import_kineto_cmd(files: Annotated[list[Path], typer.Argument(help="Kineto/torch.profiler JSON, one per rank.")],
                      out_dir: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run directory to write.")] = None,
                      rank: Annotated[Optional[list[int]], typer.Option(help="Rank of each file, when the "
                                                                        "files do not say.")] = None,
                      hardware: Annotated[Optional[str], typer.Option(help="Hardware catalog name.")] = None):
    """Import torch.profiler (Kineto) traces as a measured maya_trace_spec run and catalog it."""
    from maya_trace_spec.interop.kineto import import_kineto

    from maya.core.paths import runs_dir
    from maya.core.warehouse import register_run

    target = out_dir or runs_dir() / files[0].name.split(".")[0]
    try:
        run_dir = import_kineto(files, target, ranks=rank, hardware=hardware)
    except (TraceError, FileExistsError, ValueError) as e:
        fail(str(e))
    run_id = register_run(run_dir)
    out.print(f"imported {len(files)} file(s) into {run_dir} (run {run_id})")


@trace_app.command("migrate")
def trace_migrate(path: Annotated[Path, typer.Argument(help="Run directory.")]):
    """Rewrite every file of an older major version in the current version (each file atomically)."""
    from maya_trace_spec.io import migrate_run

    try:
        n = migrate_run(path)
    except TraceError as e:
        fail(str(e))
    out.print(f"migrated {n} file(s)" if n else "nothing to migrate: every file is current")


@profile_app.command("workload", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile_workload_cmd(ctx: typer.Context,
                         out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory to write (trace), "
                                                               "or results directory (--measure, --suite).")],
                         hardware: Annotated[Optional[str], typer.Option(help="Hardware catalog name.")] = None,
                         measure: Annotated[bool, typer.Option("--measure", help="Ground truth: time warm-up + "
                                                               "measured iterations (CUDA events), memory peaks, "
                                                               "OOM, a trace of 2 more iterations.")] = False,
                         name: Annotated[Optional[str], typer.Option(help="Config name of a --measure run "
                                                                          "(default: the script's name).")] = None,
                         suite: Annotated[Optional[Path], typer.Option(help="Suite file (.py defining CONFIGS, or "
                                                                             ".json): measure its configs not yet "
                                                                             "in --out, each in a fresh process.")] = None,
                         config: Annotated[Optional[str], typer.Option(help="Only this config of the --suite, in "
                                                                            "this process.")] = None,
                         budget_min: Annotated[float, typer.Option("--budget-min", help="Suite time budget in "
                                                                                        "minutes.")] = 8.0,
                         warmup: Annotated[int, typer.Option(help="Warm-up iterations.")] = 5,
                         iterations: Annotated[int, typer.Option(help="Measured iterations.")] = 10,
                         iterations_by: Annotated[Optional[str], typer.Option(
                             "--iterations-by", help="Dotted path of the function whose calls end iterations, for "
                                                     "scripts without an optimizer (e.g. torch.Tensor.backward).")] = None):
    """Run `-- python SCRIPT ARGS` under torch.profiler and store the measured trace; with --measure or
    --suite, measure ground truth (iteration times, memory peaks, a 2-iteration trace) instead."""
    if measure or suite is not None:
        from maya.profiler.workloads.cli import UsageError, WorkloadRequest, run_request

        request = WorkloadRequest(out_dir, script_argv(ctx.args) if ctx.args or suite is None else [], hardware,
                                  measure, name, suite, config, budget_min, warmup, iterations, iterations_by)
        try:
            code = run_request(request, log=lambda line: out.print(line, markup=False, highlight=False,
                                                                   soft_wrap=True))
        except UsageError as e:
            fail(str(e), 2)
        except (ValueError, FileExistsError) as e:
            fail(str(e))
        raise typer.Exit(code)
    from maya.profiler.workloads.trace import profile_workload

    from maya.core.warehouse import register_run

    argv = script_argv(ctx.args)
    try:
        run_dir = profile_workload(argv, out_dir, hardware=hardware)
    except (TraceError, FileExistsError) as e:
        fail(str(e))
    out.print(f"profiled {' '.join(argv)} into {run_dir} (run {register_run(run_dir)})")


@profile_app.command("kernels")
def profile_kernels_cmd(out_dir: Annotated[Path, typer.Option("--out", "-o", help="Campaign directory (created "
                                                                                  "or resumed).")],
                        families: Annotated[Optional[str], typer.Option(help="Comma-separated kernel families "
                                                                             "(default: all).")] = None,
                        budget_min: Annotated[float, typer.Option("--budget-min", help="Stop cleanly before this "
                                                                                       "many minutes.")] = 12.0,
                        seed: Annotated[int, typer.Option(help="Seed of the sweep order.")] = 0,
                        hardware: Annotated[Optional[str], typer.Option(help="Hardware catalog name.")] = None):
    """Measure GPU kernels over a sweep of real training shapes (resumable; stops before the budget)."""
    from maya.profiler.kernels.campaign import CampaignSettings, NoDevice, run_campaign
    from maya.profiler.kernels.campaign_store import CampaignMismatch
    from maya.profiler.kernels.configs import FAMILIES, parse_families

    try:
        chosen = parse_families(families) if families else FAMILIES
    except ValueError as e:
        fail(str(e), 2)
    settings = CampaignSettings(families=chosen, budget_s=budget_min * 60, seed=seed, hardware=hardware)
    try:
        result = run_campaign(out_dir, settings, log=lambda line: out.print(line, markup=False, highlight=False))
    except (NoDevice, CampaignMismatch) as e:
        fail(str(e))
    for line in result.summary_lines():
        out.print(line, markup=False, highlight=False)
    if result.stop_reason == "cuda-error":
        raise typer.Exit(1)


@app.command()
def demo(out_dir: Annotated[Optional[Path], typer.Option("--out", "-o", help="Run directory to write.")] = None,
         training_sample: Annotated[int, typer.Option(min=1000, help="Shipped measurements to train the estimators "
                                                                     "on when none are registered.")] = 20_000):
    """Maya's main job on the embedded defaults: emulate the bundled example on a virtual H100, train
    the kernel estimators if needed, predict iteration time, memory and cost, and show the trace."""
    from .demo import run_demo

    run_demo(out, out_dir, training_sample)
