"""Pieces shared by the `maya` subcommands: consoles, failing with a message, the options every command
spells the same way, deprecated spellings, script arguments."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from rich.console import Console
from typer.core import TyperCommand

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""Context settings of the root command (inherited by every command): `-h` as well as `--help`."""
SCRIPT_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Context settings of the commands that take the user's script after `--`."""
SCRIPT_USAGE = "[OPTIONS] -- SCRIPT [ARGS]..."
"""Usage line of the commands that take the user's script after `--`."""

out = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def deprecated(old: str, new: str) -> None:
    """Tell the user (stderr) that `old` still works for one release and `new` replaces it."""
    err.print(f"warning: {old} is deprecated; use {new}", highlight=False, markup=False)


class Command(TyperCommand):
    """A command that accepts the deprecated spellings of its options (`renamed`: old -> new) for one
    release, with a warning; a command kept as a deprecated alias names its replacement (`replaced_by`)."""

    renamed: ClassVar[dict[str, str]] = {}
    replaced_by: ClassVar[str | None] = None

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._rename(args))

    def invoke(self, ctx: typer.Context) -> Any:
        if self.replaced_by:
            deprecated(ctx.command_path, self.replaced_by)
        return super().invoke(ctx)

    def _rename(self, args: list[str]) -> list[str]:
        """`args` with each old option spelling (`--old` or `--old=VALUE`) in the new one, up to `--`."""
        renamed = list(args)
        for i, arg in enumerate(args):
            if arg == "--":
                break
            old, eq, value = arg.partition("=")
            if old in self.renamed:
                deprecated(old, self.renamed[old])
                renamed[i] = self.renamed[old] + eq + value
        return renamed


def command(renamed: dict[str, str] | None = None, replaced_by: str | None = None) -> type[Command]:
    """The command class to register a command with (`cls=`): its deprecated option spellings, or the
    command replacing it."""
    return type("Command", (Command,), {"renamed": renamed or {}, "replaced_by": replaced_by})


class Durations(str, Enum):
    """Where kernel and collective durations come from."""

    auto = "auto"
    estimators = "estimators"
    roofline = "roofline"
    measured = "measured"


WAREHOUSE = Annotated[
    Path | None,
    typer.Option("--warehouse", help="Warehouse file (default: $MAYA_WAREHOUSE, else warehouse.duckdb in $MAYA_HOME)."),
]
"""The warehouse a command reads or writes."""
JSON = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of tables.")]
"""Machine-readable output."""
ESTIMATOR_VERSION = Annotated[
    str,
    typer.Option("--estimator-version", help="Kernel estimator version or alias (maya estimators list shows them)."),
]
"""The kernel estimator version a command prices with (was `--model-version`)."""
JOBS = Annotated[
    int, typer.Option("--jobs", min=1, help="Evaluations run at once (each emulation already uses every core).")
]
"""Concurrency (was `--parallel` in `maya search`)."""
DURATIONS = Annotated[
    Durations,
    typer.Option(
        "--durations",
        help="Where durations come from; auto: measured if the trace has them, else the estimators, else the roofline.",
    ),
]
"""The duration source of a prediction."""
CLUSTER = Annotated[
    str | None,
    typer.Option("--cluster", help="Cluster for collectives: a name listed by maya clusters, or a .json spec file."),
]
"""The cluster (GPUs per node, links, network) collectives are priced on."""


def hardware_option(role: str) -> Any:
    """`--hardware`: a catalog name or a part's file; `role` says what the GPU is for."""
    return typer.Option(
        "--hardware", help=f"GPU {role}: a name listed by maya hardware, or a .json/.yaml file describing one."
    )


def out_option(what: str) -> Any:
    """`--out` / `-o`: where a command writes; `what` says what it is."""
    return typer.Option("--out", "-o", help=what)


LAUNCHERS = frozenset(
    {
        "accelerate",
        "deepspeed",
        "lightning",
        "mpirun",
        "srun",
        "composer",
        "torchrun",
        "torchx",
        "horovodrun",
        "colossalai",
        "ray",
    }
)
"""Commands that start a job's ranks: `script_argv` refuses them all, with the console scripts and modules of
`maya.emulator.launch_commands` (which only `maya emulate` reads, before: torchrun, `accelerate launch`, deepspeed,
`trl`, `tune run` and their aliases)."""

PIP_SH_WRAPPER = "'''exec' "
"""The second line of pip's `#!/bin/sh` console script (when its Python's path is too long for `#!`)."""


def _interpreter(path: str) -> str | None:
    """The Python that runs the script at `path`: `#!PYTHON`, `#!/usr/bin/env python3` (the first on PATH) or
    pip's `#!/bin/sh` wrapper (`'''exec' PYTHON "$0" "$@"` on its second line); None for anything else."""
    import shlex
    import shutil

    try:
        with open(path, "rb") as f:
            first, second = (f.readline(4096).decode(errors="replace") for _ in range(2))
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if len(words) > 1 and Path(words[0]).name == "env":
        words = [shutil.which(words[1]) or words[1]]
    elif words and Path(words[0]).name == "sh" and second.startswith(PIP_SH_WRAPPER):
        words = shlex.split(second[len(PIP_SH_WRAPPER) :])[:1]
    return words[0] if words and Path(words[0]).name.startswith("python") else None


def console_script(name: str) -> Path | None:
    """The file of `name` when it is a Python console script on PATH (`litgpt`; its Python as `_interpreter`
    reads it), or None; one of another Python environment than this one fails, naming both."""
    import shutil
    import sys

    found = shutil.which(name)
    python = None if found is None else _interpreter(found)
    if python is None:
        return None
    if Path(python).parent.resolve() != Path(sys.executable).parent.resolve():
        fail(
            f"{name}: a console script of another Python environment ({python}); maya runs scripts in its own "
            f"({sys.executable}): install maya in that environment and run its maya",
            2,
        )
    return Path(found)


def script_argv(args: list[str]) -> list[str]:
    """`python SCRIPT ARGS` / `python -m MODULE ARGS` / `SCRIPT ARGS` / `CONSOLE_SCRIPT ARGS` -> what runpy
    needs (a console script on PATH, `litgpt pretrain ...`, runs as the Python file it is); launchers fail."""
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
    if not args:
        fail("give the script after --, e.g. `-- python train.py --steps 3`", 2)
    from maya.emulator.launch_commands import COMMANDS, MODULES, UNREAD_MODULES

    launcher = args[1] if args[0] == "-m" and len(args) > 1 else Path(args[0]).name
    if launcher in LAUNCHERS or launcher in COMMANDS or launcher in MODULES or launcher in UNREAD_MODULES:
        fail(
            f"{launcher}: a launcher, which maya does not run: it starts every rank itself; give the GPUs "
            "(--nproc-per-node, --nnodes) and the script, `-- python SCRIPT ARGS` (torchrun, `accelerate launch`, `trl`, "
            "`tune run` and deepspeed commands are read as they are by maya emulate)",
            2,
        )
    if args[0] != "-m" and not Path(args[0]).is_file():
        script = console_script(args[0])
        if script is None:
            fail(f"{args[0]}: no such script", 2)
        return [str(script), *args[1:]]
    return args


def parse_ranks(spec: str) -> list[int]:
    """`0,2,8-11` -> [0, 2, 8, 9, 10, 11]."""
    ranks: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                ranks.extend(range(lo, hi + 1))
            else:
                ranks.append(int(part))
        except ValueError:
            fail(f"--ranks: {part!r} is not a rank or a range like 8-11", 2)
    return sorted(set(ranks))


def row_progress(transient: bool = False):
    """The progress bar of a suite's rows on stderr (`maya validate`, `maya dashboard`): the task's description,
    a bar, rows done of all, the elapsed time and the task's `last` field (the last row's outcome)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=err,
        transient=transient,
    )
