"""`maya trace`: check, export, import and migrate maya_trace_spec runs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from maya_trace_spec import TraceError

from .common import WAREHOUSE, command, err, fail, out, out_option

trace_app = typer.Typer(help="Check, export, import and migrate maya_trace_spec runs.", no_args_is_help=True)
import_app = typer.Typer(help="Import traces from other tools as measured runs.", no_args_is_help=True)
trace_app.add_typer(import_app, name="import")


@trace_app.command("check")
def trace_check(path: Annotated[Path, typer.Argument(metavar="PATH", help="Run directory or one table file.")]):
    """Check a run against the trace spec (its schema).

    File identity and version, columns and types, row constraints, references between tables. (Accuracy
    against measurements is `maya validate`.)
    """
    from maya_trace_spec import inspect_file
    from maya_trace_spec.validation import incomplete, unheld_work, validate_file, validate_run

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
    why = incomplete(path) if path.is_dir() else None
    if why:
        fail(f"{path} conforms to maya_trace_spec but is not a whole capture: {why}")
    unheld = unheld_work(path) if path.is_dir() else None
    if unheld:
        err.print(f"[yellow]warning:[/] {path}: {unheld}", highlight=False)
    out.print(f"[green]✓[/] {path} is a valid maya_trace_spec trace")


trace_app.command(
    "validate",
    hidden=True,
    help="Deprecated alias of maya trace check (the schema check).",
    cls=command(replaced_by="maya trace check"),
)(trace_check)


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    chakra = "chakra"


@trace_app.command("export")
def trace_export(
    path: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="Run directory.")],
    format: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", help="perfetto: a Perfetto/Chrome JSON timeline; chakra: Chakra ETs."),
    ] = ExportFormat.perfetto,
    out_path: Annotated[Path | None, out_option("Output file (perfetto) or prefix (chakra).")] = None,
):
    """Export a run as a Perfetto timeline or as Chakra execution traces.

    Perfetto/Chrome JSON: one process per rank, one track per stream (open it in
    https://ui.perfetto.dev). Chakra: one execution trace file per rank.
    """
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
def import_kineto_cmd(
    files: Annotated[list[Path], typer.Argument(metavar="FILES", help="Kineto/torch.profiler JSON, one per rank.")],
    out_dir: Annotated[Path | None, out_option("Run directory to write (default: one in $MAYA_HOME/runs).")] = None,
    rank: Annotated[list[int] | None, typer.Option(help="Rank of each file, when the files do not say.")] = None,
    hardware: Annotated[
        str | None, typer.Option(help="GPU the traces were measured on: a name listed by maya hardware.")
    ] = None,
    warehouse: WAREHOUSE = None,
):
    """Import torch.profiler (Kineto) traces as a measured run.

    The run is written in maya_trace_spec and registered in the warehouse.
    """
    from maya.core.paths import runs_dir
    from maya.core.warehouse import register_run
    from maya_trace_spec.interop.kineto import import_kineto

    target = out_dir or runs_dir() / files[0].name.split(".")[0]
    try:
        run_dir = import_kineto(files, target, ranks=rank, hardware=hardware)
    except (TraceError, FileExistsError, ValueError) as e:
        fail(str(e))
    run_id = register_run(run_dir, warehouse)
    out.print(f"imported {len(files)} file(s) into {run_dir} (run {run_id})")


@trace_app.command("migrate")
def trace_migrate(path: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="Run directory.")]):
    """Rewrite a run's files of an older major version in the current one.

    Each file is rewritten atomically; a run already current is left as it is.
    """
    from maya_trace_spec.reader import migrate_run

    try:
        n = migrate_run(path)
    except TraceError as e:
        fail(str(e))
    out.print(f"migrated {n} file(s)" if n else "nothing to migrate: every file is current")
