"""The `maya` command line: the root command, wiring each command group's module."""

from __future__ import annotations

from typing import Annotated

import typer

from maya import __version__

from .catalog import clusters_cmd, hardware_cmd
from .common import HELP_OPTIONS, SCRIPT_COMMAND, SCRIPT_USAGE, command, out
from .dashboard import dashboard_cmd
from .demo import demo_cmd
from .emulate import emulate_cmd
from .estimators import estimators_app
from .memory import memory_cmd
from .predict import predict_cmd
from .profile import profile_app
from .search import search_cmd
from .sql import sql_cmd
from .trace import trace_app
from .validate import validate_cmd

app = typer.Typer(
    help="Maya: predict training time, memory and cost on virtual GPUs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    rich_markup_mode="markdown",
)
SCRIPT = {"context_settings": SCRIPT_COMMAND, "options_metavar": SCRIPT_USAGE}
"""Registration of the commands that take the user's script after `--`."""
app.command("demo")(demo_cmd)
app.command("emulate", **SCRIPT)(emulate_cmd)
app.command("predict", cls=command({"--model-version": "--estimator-version"}))(predict_cmd)
app.command("memory")(memory_cmd)
app.command("search", cls=command({"--parallel": "--jobs"}), **SCRIPT)(search_cmd)
app.command("sql")(sql_cmd)
app.command("dashboard")(dashboard_cmd)
app.command("validate", cls=command({"--model-version": "--estimator-version"}))(validate_cmd)
app.command("hardware")(hardware_cmd)
app.command("clusters")(clusters_cmd)
app.add_typer(trace_app, name="trace")
app.add_typer(profile_app, name="profile")
app.add_typer(estimators_app, name="estimators")


def _version(value: bool) -> None:
    if value:
        out.print(f"maya {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
):
    """Maya: how fast, how much memory, how much money, and which configuration is best."""
