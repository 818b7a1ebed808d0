"""`maya emulate -- python train.py ARGS`: run a training script on virtual GPUs and keep its trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from maya.core.hardware import DEFAULT_HARDWARE
from maya.emulator import child_processes, unsupported
from maya.emulator.capture_cache import exception_message

from .common import (
    ESTIMATOR_VERSION,
    WAREHOUSE,
    err,
    fail,
    hardware_option,
    out,
    out_option,
    parse_ranks,
    script_argv,
)

EXIT_OOM = 3
DEFAULT_ITERATIONS = 20
"""Training iterations `maya emulate` runs unless told otherwise: enough for a steady state (the first
iteration holds initialisation and compilation), bounded for scripts written to train for days."""


def emulate_cmd(
    ctx: typer.Context,
    nnodes: Annotated[int, typer.Option(min=1, metavar="N", help="Nodes of the job.")] = 1,
    nproc_per_node: Annotated[int | None, typer.Option(min=1, metavar="N", help="GPUs (ranks) per node.")] = None,
    world_size: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="Total ranks (instead of --nproc-per-node).")
    ] = None,
    ranks: Annotated[
        str | None,
        typer.Option(
            help="Ranks to capture, e.g. 0,8-11 (default: all). The others replay the capture of their "
            "pipeline stage (an SPMD job is assumed; maya predict says so)."
        ),
    ] = None,
    hardware: Annotated[str, hardware_option("to emulate")] = DEFAULT_HARDWARE,
    dedup: Annotated[bool, typer.Option(help="Capture equivalent ranks once (verified by signature).")] = True,
    iterations: Annotated[
        int,
        typer.Option(
            min=0,
            metavar="N",
            help="Stop cleanly after this many training iterations (optimizer steps), every rank at the same "
            "one; 0 runs the script to its end. The default reaches a steady state without running a script "
            "written to train for days.",
        ),
    ] = DEFAULT_ITERATIONS,
    device_time: Annotated[
        str,
        typer.Option(
            help="What CUDA-event timings (autotuners) read: 'estimators' (Maya's estimate on the emulated "
            "GPU; the roofline when no version is registered), 'roofline', or 'host' (host time)."
        ),
    ] = "estimators",
    estimator_version: ESTIMATOR_VERSION = "latest",
    memory_history: Annotated[
        bool,
        typer.Option(
            "--memory-history",
            help="Record torch's allocator history in each captured rank (a snapshot per rank in the run's "
            "memory_history/, for maya memory and pytorch.org/memory_viz).",
        ),
    ] = False,
    out_dir: Annotated[
        Path | None, out_option("Run directory to write (default: a new one in $MAYA_HOME/runs).")
    ] = None,
    warehouse: WAREHOUSE = None,
):
    """Run a training script on virtual GPUs and store its trace.

    `maya emulate [OPTIONS] -- python SCRIPT ARGS` (or a launch: `-- torchrun --nproc-per-node N SCRIPT ARGS`,
    `-- accelerate launch --num_processes N SCRIPT ARGS`, `-- deepspeed --num_gpus N SCRIPT ARGS`, TRL's
    `-- trl sft ARGS`, torchtune's `-- tune run RECIPE --config CONFIG`): each rank runs in isolation on a virtual GPU,
    and its device-API trace (maya_trace_spec) is stored and catalogued in the warehouse. Exit code 3 when the script
    runs out of device memory. A stop signal (Ctrl-C, SIGTERM, SIGHUP) stops every rank and keeps what they captured,
    marked interrupted (exit code 128 + the signal's number).
    """
    from maya import api
    from maya.core import hardware as catalog
    from maya.core.warehouse import register_run
    from maya.emulator.build import BuildError
    from maya.emulator.launch_commands import LaunchCommandError
    from maya.emulator.launch_commands import read_apart as read_launch

    try:
        hw = catalog.get(hardware)
        launch = read_launch(ctx.args, nproc_per_node, bf16=hw.sm_major >= 8)
    except (KeyError, catalog.HardwareFileError, LaunchCommandError) as e:
        fail(str(e), 2)
    command, env, rank_argument, node_rank_variables = ctx.args, {}, None, ()
    if launch:  # the launcher's nodes and GPUs per node say the job's shape, unless ours say another
        if (
            world_size
            or (nproc_per_node and nproc_per_node != launch.nproc_per_node)
            or nnodes not in (1, launch.nnodes)
        ):
            chosen = f" ({'; '.join(launch.defaults)})" if launch.defaults else ""
            fail(
                f"{launch.launcher} launches {launch.nnodes} x {launch.nproc_per_node} ranks{chosen}: give the "
                f"job's shape once, to {launch.launcher} or to maya emulate",
                2,
            )
        command, nnodes, nproc_per_node = launch.argv, launch.nnodes, launch.nproc_per_node
        env, rank_argument, node_rank_variables = launch.env, launch.rank_argument, launch.node_rank_variables
    argv = script_argv(command)
    per_node = _per_node(nnodes, nproc_per_node, world_size)
    try:
        options = api.EmulateOptions(
            hardware=hw.name,
            nnodes=nnodes,
            nproc_per_node=per_node,
            ranks=tuple(parse_ranks(ranks)) if ranks else None,
            dedup=dedup,
            iterations=iterations or None,
            device_time=device_time,
            estimator_version=estimator_version,
            env=env,
            rank_argument=rank_argument,
            node_rank_variables=node_rank_variables,
            launch_command=tuple(ctx.args) if launch else None,
            memory_history=memory_history,
            warehouse=warehouse,
        )
        oracle = api.device_time(options)
    except (KeyError, catalog.HardwareFileError, ValueError) as e:
        fail(str(e), 2)
    err.print(f"CUDA-event timings: {oracle.described}", highlight=False)
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
            f"{Path(argv[0]).name} on {options.world_size} × {hw.name}",
            total=len(options.ranks or range(options.world_size)) if ranks or not dedup else None,
        )
        try:
            captured = api.capture(
                argv,
                options,
                out_dir=out_dir,
                oracle=oracle,
                on_rank_done=lambda _: progress.advance(task),
                on_output=lambda line: progress.console.print(line, end="", markup=False, highlight=False),
            )
        except (BuildError, OSError, ValueError) as e:  # OSError: FileExistsError, Transformer Engine's install
            fail(str(e))
        except api.CaptureInterrupted as e:
            captured, interrupted = e.capture, e
    result = captured.result
    _report(captured, hw)
    found = result.dedup or {}
    if found.get("unverified"):
        err.print(
            "[yellow]unverified[/]: "
            + ", ".join(f"rank {probe}'s calls differ from rank {rep}'s" for rep, probe in found["unverified"].items())
            + f" (not split: {found.get('unverified_reason', 'reason not recorded')}; maya predict says so)",
            highlight=False,
        )
    rebuild = result.stage_rebuild or {}
    if "rebuilt" in rebuild and rebuild["rebuilt"]:
        first, last = rebuild["rebuilt"][0], rebuild["rebuilt"][-1]
        stages = f"stages {first}-{last}" if last > first else f"stage {first}"
        checked = " and ".join(str(s) for s in rebuild["checked"])
        err.print(
            f"pipeline {stages} of {rebuild['stages']} not run: rebuilt from "
            f"{'stage 1' if isinstance(rebuild['from'], int) else 'stage 1 (odd stages) or 2 (even ones)'}'s capture in their "
            f"{rebuild.get('schedule', '1F1B')} order ({rebuild['microbatches']} "
            f"{'virtual ' if rebuild.get('schedule') else ''}micro-batches; stages {checked} rebuilt so are their "
            "captures)",
            highlight=False,
        )
    elif "refused" in rebuild or "reason" in rebuild:
        err.print(f"every pipeline stage captured: {rebuild.get('refused') or rebuild['reason']}", highlight=False)
    if interrupted:
        calls = sum(r.calls for r in result.ranks)
        err.print(
            f"[yellow]{captured.reason}[/]: every rank was stopped; the {calls:,} calls they captured are kept and "
            "the run is marked interrupted (maya predict uses its complete iterations)",
            highlight=False,
        )
        out.print(f"trace: [cyan]{result.run_dir}[/] (run {register_run(result.run_dir, warehouse)})")
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
    run_id = register_run(result.run_dir, warehouse)
    out.print(f"trace: [cyan]{result.run_dir}[/] (run {run_id})")
    if result.status == "oom":
        raise typer.Exit(EXIT_OOM)
    if result.status != "complete":
        raise typer.Exit(1)


def _per_node(nnodes: int, nproc_per_node: int | None, world_size: int | None) -> int:
    """GPUs per node from --nproc-per-node or --world-size (one of them, or neither: 1)."""
    if nproc_per_node and world_size:
        fail("give --nproc-per-node or --world-size, not both", 2)
    if world_size:
        if world_size % nnodes:
            fail(f"--world-size {world_size} is not a multiple of --nnodes {nnodes}", 2)
        return world_size // nnodes
    return nproc_per_node or 1


def _report(captured, hw) -> None:
    result = captured.result
    working = {r.rank: child_processes.working(r.children) for r in result.ranks}
    working = {rank: children for rank, children in working.items() if children}
    uncaptured = " (without the device work of processes the ranks started)" if working else ""
    table = Table(
        "rank",
        "status",
        "calls",
        "peak memory",
        "time",
        "unimplemented APIs",
        title_justify="left",
        title=f"{result.run_dir.name}: {result.status}{uncaptured}",
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
    for rank, children in working.items():
        err.print(
            f"[yellow]note:[/] rank {rank} started {len(children)} process(es) whose device calls were counted, not "
            f"captured (not in the trace, not priced): {'; '.join(map(child_processes.describe, children))}",
            highlight=False,
        )
    unimplemented = {api for r in result.ranks for api in r.unimplemented}
    for note in unsupported.notes(unimplemented, [r.error for r in result.ranks if r.error]):
        err.print(f"[red]note:[/] {note}", highlight=False)
    for oom in captured.out_of_memory():
        err.print(f"[red]{oom.describe()}[/]", highlight=False)
    failed = [r.rank for r in result.ranks if r.status == "failed"]
    if failed and any(r.status == "complete" for r in result.ranks):
        err.print(
            f"note: rank(s) {', '.join(map(str, failed))} failed where others completed. Each rank runs in "
            "isolation and receives its own data where a peer's was sent (broadcasts, receives): a script "
            "that checks that ranks agree through one fails on the ranks that are not its source. For an SPMD "
            "job, capture one rank with --ranks 0 (the others replay it, and maya predict says so).",
            highlight=False,
        )
