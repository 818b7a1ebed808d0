"""`maya trace`: validate, export, import and migrate maya_trace_spec runs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from maya_trace_spec import TraceError

from .common import err, fail, out

trace_app = typer.Typer(help="Validate, import, export and migrate maya_trace_spec runs.", no_args_is_help=True)
import_app = typer.Typer(help="Import traces from other tools.", no_args_is_help=True)
trace_app.add_typer(import_app, name="import")


@trace_app.command("validate")
def trace_validate(path: Annotated[Path, typer.Argument(help="Run directory or one table file.")]):
    """Check a run against the spec: file identity and version, columns and types, row constraints,
    references between tables."""
    from maya_trace_spec import inspect_file
    from maya_trace_spec.validation import incomplete, validate_file, validate_run

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
    out.print(f"[green]✓[/] {path} is a valid maya_trace_spec trace")


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    chakra = "chakra"


@trace_app.command("export")
def trace_export(
    path: Annotated[Path, typer.Argument(help="Run directory.")],
    format: Annotated[ExportFormat, typer.Option("--format", "-f")] = ExportFormat.perfetto,
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output file (perfetto) or prefix (chakra).")
    ] = None,
):
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
def import_kineto_cmd(
    files: Annotated[list[Path], typer.Argument(help="Kineto/torch.profiler JSON, one per rank.")],
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory to write.")] = None,
    rank: Annotated[list[int] | None, typer.Option(help="Rank of each file, when the files do not say.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware catalog name.")] = None,
):
    """Import torch.profiler (Kineto) traces as a measured maya_trace_spec run and catalog it."""
    from maya.core.paths import runs_dir
    from maya.core.warehouse import register_run
    from maya_trace_spec.interop.kineto import import_kineto

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
    from maya_trace_spec.reader import migrate_run

    try:
        n = migrate_run(path)
    except TraceError as e:
        fail(str(e))
    out.print(f"migrated {n} file(s)" if n else "nothing to migrate: every file is current")
