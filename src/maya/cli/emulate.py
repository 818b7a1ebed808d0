"""`maya emulate -- python train.py ARGS`: run a training script on virtual GPUs and keep its trace."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from maya.core.hardware import DEFAULT_HARDWARE

from .common import err, fail, out, parse_ranks, script_argv, torchrun_command

EXIT_OOM = 3
DEFAULT_ITERATIONS = 20
"""Training iterations `maya emulate` runs unless told otherwise: enough for a steady state (the first
iteration holds initialisation and compilation), bounded for scripts written to train for days."""


def emulate_cmd(
    ctx: typer.Context,
    nnodes: Annotated[int, typer.Option(min=1, help="Nodes of the job.")] = 1,
    nproc_per_node: Annotated[int | None, typer.Option(min=1, help="GPUs (ranks) per node.")] = None,
    world_size: Annotated[
        int | None, typer.Option(min=1, help="Total ranks (alternative to --nproc-per-node).")
    ] = None,
    ranks: Annotated[
        str | None,
        typer.Option(
            help=(
                "Ranks to capture, e.g. 0,8-11 (default: all); the uncaptured ranks replay the capture of "
                "their pipeline stage (an SPMD job assumed, and maya predict says so)."
            )
        ),
    ] = None,
    hardware: Annotated[
        str,
        typer.Option(
            help="GPU model to emulate: a catalog name (see data/hardware) or a .json/.yaml file describing one."
        ),
    ] = DEFAULT_HARDWARE,
    dedup: Annotated[bool, typer.Option(help="Capture equivalent ranks once (verified by signature).")] = True,
    iterations: Annotated[
        int,
        typer.Option(
            min=0,
            help=(
                "Stop the script cleanly once this many training iterations (optimizer steps; several "
                "optimizers stepping together count once) are done, every rank at the same one, at the "
                f"start of the next; 0 runs it to its end. Default {DEFAULT_ITERATIONS}: a steady state "
                "for the prediction, without running a script written to train for thousands of steps."
            ),
        ),
    ] = DEFAULT_ITERATIONS,
    device_time: Annotated[
        str,
        typer.Option(
            help=(
                "What CUDA-event timings read (autotuners timing candidate kernels: Inductor max-autotune, "
                "Triton @autotune, cudnn.benchmark): 'estimators' (Maya's estimate on the emulated GPU by "
                "the --estimator-version; the roofline when none is registered), 'roofline', or 'host' "
                "(host time between the records)."
            )
        ),
    ] = "estimators",
    estimator_version: Annotated[
        str, typer.Option(help="Estimator version (or alias) of --device-time estimators.")
    ] = "latest",
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory to write.")] = None,
):
    """Run `-- python SCRIPT ARGS` (or `-- torchrun --nproc-per-node N SCRIPT ARGS`) unchanged on virtual GPUs,
    each rank in isolation, and store the device-API trace (maya_trace_spec). Exit code 3 when the script runs
    out of device memory. A stop signal (Ctrl-C, SIGTERM, SIGHUP) stops every rank and keeps what they captured,
    marked interrupted (exit code 128 + the signal's number)."""
    from maya.core import hardware as catalog
    from maya.core.paths import runs_dir
    from maya.core.warehouse import register_run
    from maya.emulator.build import BuildError
    from maya.emulator.launcher import Interrupted, emulate

    command, launched = torchrun_command(ctx.args)
    if launched:  # torchrun's --nnodes and --nproc-per-node say the job's shape, unless ours say it already
        if world_size or (nproc_per_node and nproc_per_node != launched[1]) or nnodes not in (1, launched[0]):
            fail(
                f"torchrun launches {launched[0]} x {launched[1]} ranks: give the job's shape once, to torchrun or "
                "to maya emulate",
                2,
            )
        nnodes, nproc_per_node = launched
    argv = script_argv(command)
    topology = _topology(nnodes, nproc_per_node, world_size)
    try:
        hw = catalog.get(hardware)
    except (KeyError, catalog.HardwareFileError) as e:
        fail(str(e), 2)
    oracle = _device_time(device_time, estimator_version, hw.name)
    wanted = parse_ranks(ranks) if ranks else list(range(topology.world_size))
    target = out_dir or runs_dir() / time.strftime("emulate-%Y%m%d-%H%M%S")
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]emulating[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    interrupted = None
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(
            f"{Path(argv[0]).name} on {topology.world_size} × {hw.name}",
            total=len(wanted) if ranks or not dedup else None,
        )
        try:
            result = emulate(
                argv,
                target,
                hardware=hw.name,
                topology=topology,
                ranks=wanted if ranks else None,
                dedup=dedup,
                iterations=iterations or None,
                device_time=oracle,
                on_rank_done=lambda _: progress.advance(task),
                on_output=lambda line: progress.console.print(line, end="", markup=False, highlight=False),
            )
        except (BuildError, FileExistsError, ValueError) as e:
            fail(str(e))
        except Interrupted as e:
            result, interrupted = e.result, e
    _report(result, hw)
    if interrupted:
        captured = sum(r.calls for r in result.ranks)
        err.print(
            f"[yellow]interrupted by {result.interrupted_by}[/]: every rank was stopped; the {captured:,} calls "
            "they captured are kept and the run is marked interrupted (maya predict uses its complete iterations)",
            highlight=False,
        )
        out.print(f"trace: [cyan]{result.run_dir}[/] (run {register_run(result.run_dir)})")
        raise typer.Exit(interrupted.exit_code)
    stopped = {r.info.get("stopped_at_iteration") for r in result.ranks} - {None}
    if stopped:
        out.print(
            f"stopped after {', '.join(map(str, sorted(stopped)))} training iterations (--iterations {iterations})"
        )
    elif (
        iterations and result.status == "complete" and not any(r.info.get("optimizer_iterations") for r in result.ranks)
    ):
        out.print(
            f"note: --iterations {iterations} did not bound this run: it counts optimizer steps (torch.optim), "
            "and the script made none (it updates its weights itself), so it ran to its end; `maya predict` "
            "finds its iterations by repetition"
        )
    run_id = register_run(result.run_dir)
    out.print(f"trace: [cyan]{result.run_dir}[/] (run {run_id})")
    if result.status == "oom":
        raise typer.Exit(EXIT_OOM)
    if result.status != "complete":
        raise typer.Exit(1)


def _device_time(choice: str, version: str, hardware: str) -> str | None:
    """The device-time oracle the ranks install (`maya.emulator.device_time`), told to the user; None: host time."""
    from maya.emulator.device_time import spec
    from maya.simulator.device_time import FACTORY, resolve

    try:
        options, described = resolve(choice, version)
    except ValueError as e:
        fail(str(e), 2)
    err.print(f"CUDA-event timings: {described}", highlight=False)
    return None if options is None else spec(FACTORY, hardware=hardware, **options)


def _topology(nnodes: int, nproc_per_node: int | None, world_size: int | None):
    from maya.emulator.launcher import Topology

    if nproc_per_node and world_size:
        fail("give --nproc-per-node or --world-size, not both", 2)
    if world_size:
        if world_size % nnodes:
            fail(f"--world-size {world_size} is not a multiple of --nnodes {nnodes}", 2)
        return Topology(nnodes, world_size // nnodes)
    return Topology(nnodes, nproc_per_node or 1)


def _report(result, hw) -> None:
    table = Table(
        "rank",
        "status",
        "calls",
        "peak memory",
        "time",
        "unimplemented APIs",
        title_justify="left",
        title=f"{result.run_dir.name}: {result.status}",
    )
    for r in result.ranks:
        status = {
            "complete": "[green]complete[/]",
            "oom": "[red]out of memory[/]",
            "interrupted": "[yellow]interrupted[/]",
        }.get(r.status, f"[red]{r.status}[/]")
        peak = f"{r.peak_bytes / 2**30:.2f} / {hw.memory_bytes / 2**30:.1f} GiB"
        unimpl = ", ".join(f"{k} ×{v}" for k, v in sorted(r.unimplemented.items())) or "-"
        table.add_row(str(r.rank), status, f"{r.calls:,}", peak, f"{r.seconds:.1f} s", unimpl)
    out.print(table)
    for r in result.ranks:
        if r.error:
            err.print(f"[red]rank {r.rank}:[/] {exception_message(r.error)}", highlight=False)
        if r.status == "oom":
            err.print(f"[red]rank {r.rank} ran out of memory[/] {_oom_site(result.run_dir, r.rank)}", highlight=False)
    failed = [r.rank for r in result.ranks if r.status == "failed"]
    if failed and any(r.status == "complete" for r in result.ranks):
        err.print(
            f"note: rank(s) {', '.join(map(str, failed))} failed where others completed. Each rank runs in "
            "isolation and receives its own data where a peer's was sent (broadcasts, receives): a script "
            "that checks that ranks agree through one fails on the ranks that are not its source. For an SPMD "
            "job, capture one rank with --ranks 0 (the others replay it, and maya predict says so).",
            highlight=False,
        )


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


def exception_message(error: str) -> str:
    """A failed rank's exception, type and whole message (which may span lines), from its traceback; else
    the traceback's last line."""
    lines = error.strip().splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if _EXCEPTION_LINE.match(lines[i])), len(lines) - 1)
    return " ".join(line.strip() for line in lines[start:])[:2000]


def _oom_site(run_dir: Path, rank: int) -> str:
    """Where the failed allocation was made: its size, the op and module, the phase and iteration."""
    from maya_trace_spec import read_table

    events = [e for e in read_table(run_dir, "memory_events", [rank]).to_pylist() if e["kind"] == "oom"]
    if not events:
        return ""
    oom = events[0]
    ops = {o["op_id"]: o for o in read_table(run_dir, "ops", [rank]).to_pylist()}
    op = ops.get(oom["op_id"]) or {}
    where = ", ".join(f"{k} {op[k]}" for k in ("name", "module_path", "phase", "iteration") if op.get(k) is not None)
    peak = max((e["allocated_bytes"] for e in read_table(run_dir, "memory_events", [rank]).to_pylist()), default=0)
    return f"requesting {oom['bytes'] / 2**30:.2f} GiB with {peak / 2**30:.2f} GiB in use" + (
        f" ({where})" if where else ""
    )
