"""`maya search --space space.yaml -- python train.py --tp {tp} ...`: find the best configuration."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from maya.core.hardware import DEFAULT_HARDWARE

from .common import CLUSTER, DURATIONS, JOBS, WAREHOUSE, Durations, err, fail, out, out_option, script_argv

RANKED_ROWS = 20


class Objective(str, Enum):
    time = "time"
    cost = "cost"
    tokens_per_dollar = "tokens-per-dollar"


class Algorithm(str, Enum):
    grid = "grid"
    random = "random"
    cmaes = "cmaes"


class ExecutorKind(str, Enum):
    local = "local"
    ray = "ray"


def search_cmd(
    ctx: typer.Context,
    space: Annotated[Path, typer.Option(help="Space file (YAML): parameters, derived values, constraints, roles.")],
    cluster: CLUSTER = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="GPUs of the job (else the space's).")] = None,
    objective: Annotated[
        Objective, typer.Option(help="What to minimise (tokens-per-dollar: maximise).")
    ] = Objective.time,
    algorithm: Annotated[Algorithm, typer.Option(help="Search algorithm.")] = Algorithm.cmaes,
    budget: Annotated[
        int | None,
        typer.Option(min=1, help="Most points to evaluate (default: all for grid, else 30% of the valid ones)."),
    ] = None,
    executor: Annotated[ExecutorKind, typer.Option(help="Where points are evaluated.")] = ExecutorKind.local,
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (--executor ray).")] = None,
    jobs: JOBS = 1,
    price_per_gpu_hour: Annotated[
        float | None, typer.Option(min=0, help="Price of one GPU-hour (costs are GPU-hours without it).")
    ] = None,
    durations: DURATIONS = Durations.auto,
    seed: Annotated[int, typer.Option(help="Seed of random and CMA-ES searches.")] = 0,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Search id to resume (a search with the same space, command, settings, script, installed packages, "
            "emulator and predictor resumes anyway)."
        ),
    ] = None,
    out_dir: Annotated[Path | None, out_option("Directory for traces and the Pareto plot.")] = None,
    warehouse: WAREHOUSE = None,
):
    """Find the best configuration: time, cost or tokens per dollar.

    `maya search [OPTIONS] -- python SCRIPT ARGS`, the script's arguments naming the space's parameters
    (`--tp {tp}`): each point is emulated and predicted (identical commands and traces once), Maya's
    pruning rules skip the points they decide, and every point is logged in the warehouse
    (`search_points`).
    """
    import duckdb

    from maya.core.paths import maya_home
    from maya.search import (
        UNRESOLVED,
        LocalExecutor,
        MayaEvaluator,
        RayExecutor,
        SearchLog,
        SpaceError,
        UnknownSearch,
        evaluator_salts,
        load_space,
        run_search,
        script_digest,
        search_id,
        write_pareto_html,
    )

    command = script_argv(ctx.args)
    hardware, per_node = DEFAULT_HARDWARE, 8
    if cluster:
        from maya.core.clusters import UnknownCluster, load_cluster

        try:
            spec = load_cluster(cluster)
        except (UnknownCluster, OSError, ValueError) as e:
            fail(str(e), 2)
        hardware, per_node = spec.hardware or hardware, spec.gpus_per_node
    try:
        the_space = load_space(space, command, gpus)
    except SpaceError as e:
        fail(f"{space}: {e}", 2)
    script = script_digest(command)
    if script == UNRESOLVED:
        err.print(
            f"[yellow]warning:[/] cannot read the script of `{' '.join(command[:2])}`: the command cache cannot see "
            "its edits (searches after an edit reuse the earlier captures)"
        )
    from maya.installer import transformer_engine

    if transformer_engine.imports_te(command):  # before the salts: the capture salt digests the installed packages
        try:
            transformer_engine.ensure(f"{Path(command[0]).name}, which imports transformer_engine,")
        except (ValueError, OSError) as e:
            fail(str(e), 2)
    try:
        salts = evaluator_salts(
            hardware, per_node, durations.value, cluster, script=script, warehouse=str(warehouse) if warehouse else None
        )
    except ValueError as e:  # MAYA_HOST_FACTOR that is not a factor
        fail(str(e), 2)
    except (duckdb.Error, OSError) as e:
        fail(f"cannot read the estimator version from the warehouse: {e}", 2)
    sid = resume or search_id(the_space, algorithm.value, objective.value, seed, salts.search, price_per_gpu_hour)
    target = (out_dir or maya_home() / "searches" / sid).resolve()
    evaluator = MayaEvaluator(
        str(target), salts, hardware, per_node, durations.value, cluster, str(warehouse) if warehouse else None
    )
    log = SearchLog(sid, warehouse)
    try:
        log.open(
            the_space.digest(),
            command,
            {
                "algorithm": algorithm.value,
                "objective": objective.value,
                "hardware": hardware,
                "cluster": cluster,
                "seed": seed,
                "price_per_gpu_hour": price_per_gpu_hour,
            },
            must_exist=bool(resume),
        )
    except (UnknownSearch, ValueError) as e:
        fail(str(e).strip('"'), 2)
    pool = RayExecutor(ray_address) if executor is ExecutorKind.ray else LocalExecutor(jobs)
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]searching[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
    )
    t0 = time.monotonic()
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(f"{sid} ({algorithm.value})", total=len(the_space.valid_points()), best="")

        def advance(record, result) -> None:
            best = result.best
            progress.update(
                task,
                completed=len(result.records),
                best=f"best {_figure(best.objective, objective.value)}" if best else "",
            )

        try:
            result = run_search(
                the_space,
                evaluator,
                algorithm=algorithm.value,
                objective=objective.value,
                budget=budget,
                executor=pool,
                log=log,
                price_per_gpu_hour=price_per_gpu_hour,
                seed=seed,
                parallel=jobs,
                on_record=advance,
            )
        except ValueError as e:
            fail(str(e), 2)
    unit = "$" if price_per_gpu_hour is not None else "GPU-h"
    _print(result, unit, objective.value)
    plot = write_pareto_html(result, target / "pareto.html", cost_unit=unit)
    out.print(
        f"{result.evaluations} of {result.valid_points} valid points evaluated, {len(result.records)} decided "
        f"in {time.monotonic() - t0:.0f} s; search {sid} (warehouse table search_points)",
        style="dim",
    )
    out.print(f"Pareto plot: [cyan]{plot}[/]")
    if result.best is None:
        fail("no configuration fits in memory")


def _figure(value: float, objective: str) -> str:
    if objective == "time":
        return f"{value * 1e3:,.2f} ms"
    if objective == "tokens-per-dollar":
        return f"{1 / value:,.4g} tokens/$"
    return f"{value:.4g}"


def _print(result, unit: str, objective: str) -> None:
    table = Table(
        "#",
        "configuration",
        "iteration",
        "peak memory",
        "MFU",
        "HFU",
        f"cost/iter ({unit})",
        "source",
        title=f"search {result.search_id}: best by {objective}",
        title_justify="left",
    )
    for i, r in enumerate(result.ranked()[:RANKED_ROWS], 1):
        o = r.outcome
        table.add_row(
            str(i),
            " ".join(f"{k}={v}" for k, v in r.params.items()),
            f"{o.iteration_ns / 1e6:,.2f} ms",
            f"{o.peak_memory_bytes / 2**30:,.2f} GiB" if o.peak_memory_bytes is not None else "-",
            f"{o.mfu:.1%}" if o.mfu is not None else "-",
            f"{o.hfu:.1%}" if o.hfu is not None else "-",
            f"{r.cost:.4g}",
            o.source if o.status != "derived" else "derived",
        )
    out.print(table)
    counts: dict[str, int] = {}
    for r in result.records:
        counts[r.outcome.status] = counts.get(r.outcome.status, 0) + 1
    out.print("points: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), style="dim")
    best = result.best
    if best is not None:
        env = " ".join(f"{k}={v}" for k, v in best.env.items())
        out.print("best command: [bold]" + " ".join(filter(None, [env, "python", *best.argv])) + "[/]", highlight=False)
