"""Pieces shared by the `maya` subcommands: consoles, failing with a message, script arguments."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

SCRIPT_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Context settings of the commands that take the user's script after `--`."""

out = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


TORCHRUN_MODULES = ("torch.distributed.run",)
"""`python -m MODULE`: torchrun run as a module."""


def torchrun_command(args: list[str]) -> tuple[list[str], tuple[int, int] | None]:
    """`torchrun [OPTIONS] SCRIPT ARGS` (or `python -m torch.distributed.run ...`), as training READMEs write
    the launch: the script's command (`SCRIPT ARGS` / `-m MODULE ARGS`) and the job's (nnodes, nproc_per_node),
    parsed by torchrun's own parser; any other command is returned as it is, with None."""
    words = list(args)
    if words and Path(words[0]).name == "torchrun":
        words = words[1:]
    elif (
        words
        and Path(words[0]).name.startswith("python")
        and len(words) > 2
        and words[1] == "-m"
        and words[2] in TORCHRUN_MODULES
    ):
        words = words[3:]
    else:
        return list(args), None
    from torch.distributed.run import get_args_parser

    try:
        parsed = get_args_parser().parse_args(words)
    except SystemExit:
        fail(f"torchrun {' '.join(words)}: torchrun's parser refused these arguments (above)", 2)
    if parsed.no_python:
        fail("torchrun --no-python: maya emulate runs Python scripts (give the script itself)", 2)
    if not str(parsed.nproc_per_node).isdigit() or int(parsed.nproc_per_node) < 1:
        fail(
            f"torchrun --nproc-per-node {parsed.nproc_per_node}: give the number of GPUs per node (maya emulate's "
            "machine has none to count)",
            2,
        )
    nodes = str(parsed.nnodes).rpartition(":")[2]  # MIN:MAX (elastic): the largest job
    if not nodes.isdigit() or int(nodes) < 1:
        fail(f"torchrun --nnodes {parsed.nnodes}: give the number of nodes", 2)
    script = ["-m", parsed.training_script] if parsed.module else [parsed.training_script]
    return [*script, *parsed.training_script_args], (int(nodes), int(parsed.nproc_per_node))


LAUNCHERS = frozenset({"accelerate", "deepspeed", "lightning", "mpirun", "srun", "composer", "litgpt", "tune"})
"""Commands that start a job's ranks (as torchrun does, whose commands `torchrun_command` reads)."""


def script_argv(args: list[str]) -> list[str]:
    """`python SCRIPT ARGS` / `python -m MODULE ARGS` / `SCRIPT ARGS` -> what runpy needs."""
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
    if not args:
        fail("give the script after --, e.g. `-- python train.py --steps 3`", 2)
    if args[0] != "-m" and not Path(args[0]).is_file():
        if Path(args[0]).name in LAUNCHERS:
            fail(
                f"{args[0]}: a launcher, which maya does not run: it starts every rank itself; give the GPUs "
                "(--nproc-per-node, --nnodes) and the script, `-- python SCRIPT ARGS` (torchrun commands are read "
                "as they are)",
                2,
            )
        fail(f"{args[0]}: no such script", 2)
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
