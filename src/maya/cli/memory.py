"""`maya memory RUN`: what holds a rank's memory at its peak, from the run's allocator history."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from maya_trace_spec import TraceError

from .common import JSON, fail, out


def memory_cmd(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory emulated with --memory-history.")],
    rank: Annotated[
        int | None,
        typer.Option(min=0, metavar="N", help="Rank to read (default: the one with the largest allocated peak)."),
    ] = None,
    top: Annotated[int, typer.Option(min=1, metavar="K", help="Allocating frames listed, largest first.")] = 10,
    as_json: JSON = False,
):
    """Show what holds a rank's peak memory, by category and frame.

    Reads the snapshot of torch's allocator history that `maya emulate --memory-history` keeps per rank, finds
    the instant of the most bytes allocated to tensors and lists what is live then, by category (inferred:
    parameters, gradients, optimizer state, activations and temporaries, other) and by the allocating frame
    (the innermost outside torch and the standard library), with the allocator's overhead at that instant.
    """
    from maya.api.memory import NoMemoryHistory, UntrustedHistory, peak_memory

    try:
        peak = peak_memory(run_dir, rank)
    except (TraceError, NoMemoryHistory, UntrustedHistory) as e:
        fail(str(e))
    if as_json:
        sys.stdout.write(json.dumps(peak.to_json(top)) + "\n")
        return
    agreement = (
        "the trace has no allocated peak"
        if peak.agrees is None
        else "equal to the trace's"
        if peak.agrees
        else f"[red]the trace says {_gib(peak.trace_allocated_bytes)}[/]"
    )
    if peak.disagreement:
        agreement += f": {peak.disagreement}"
    replayed = "" if peak.replayed_from is None else f", replayed from rank {peak.replayed_from}'s history"
    out.print(
        f"[bold]{run_dir.name}[/], rank {peak.rank}{replayed} (device {peak.device}): peak {_gib(peak.allocated_bytes)} "
        f"allocated to tensors ({agreement}) at event {peak.event:,} of {peak.events:,}",
        highlight=False,
    )
    held = peak.held_bytes
    out.print(
        f"held then {_gib(held)}: overhead {_size(peak.overhead_bytes)} (the caching allocator's free blocks)",
        highlight=False,
    )
    by = peak.reached_by
    out.print(
        f"reached by {_size(by.bytes)} of {by.category} at {_where(by.file, by.line, by.function)}", highlight=False
    )
    categories = Table("category (inferred)", "bytes", "share", "count", title_justify="left")
    for category, size, count in peak.categories():
        categories.add_row(category, _size(size), f"{size / peak.allocated_bytes:.1%}", str(count))
    out.print(categories)
    frames = Table(
        "bytes", "count", "category", "allocated at", title=f"top {top} allocating frames", title_justify="left"
    )
    frames.columns[0].justify = frames.columns[1].justify = "right"
    frames.columns[3].overflow = "fold"
    for h in peak.holders[:top]:
        frames.add_row(_size(h.bytes), str(h.count), h.category, _where(h.file, h.line, h.function))
    out.print(frames)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.3f} GiB"


def _size(n: int) -> str:
    """Bytes in the largest binary unit that keeps them at 1 or more."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _where(file: str, line: int, function: str) -> str:
    """`file:line (function)`, the file relative to the working directory when it is under it."""
    if not line:
        return file
    try:
        shown = os.path.relpath(file) if os.path.isabs(file) and Path(file).is_relative_to(Path.cwd()) else file
    except ValueError:
        shown = file
    return f"{shown}:{line} ({function})"
