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


def script_argv(args: list[str]) -> list[str]:
    """`python SCRIPT ARGS` / `python -m MODULE ARGS` / `SCRIPT ARGS` -> what runpy needs."""
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
    if not args:
        fail("give the script after --, e.g. `-- python train.py --steps 3`", 2)
    if args[0] != "-m" and not Path(args[0]).is_file():
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
