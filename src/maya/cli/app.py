"""The `maya` command line: the root command, wiring each command group's module."""

from __future__ import annotations

from typing import Annotated

import typer

from maya import __version__

from .common import SCRIPT_COMMAND, out
from .dashboard import dashboard_cmd
from .demo import demo_cmd
from .emulate import emulate_cmd
from .estimators import estimators_app
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
)
app.command("demo")(demo_cmd)
app.command("emulate", context_settings=SCRIPT_COMMAND)(emulate_cmd)
app.command("predict")(predict_cmd)
app.command("search", context_settings=SCRIPT_COMMAND)(search_cmd)
app.command("sql")(sql_cmd)
app.command("dashboard")(dashboard_cmd)
app.command("validate")(validate_cmd)
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
