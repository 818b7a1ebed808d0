"""`maya predict RUN_DIR`: replay a trace on the simulator and report time, memory and cost."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from maya.core import settings

from .common import CLUSTER, DURATIONS, ESTIMATOR_VERSION, JSON, WAREHOUSE, Durations, fail, hardware_option, out

EXIT_OOM = 3
"""As `maya emulate`: the run stopped on an out-of-memory failure."""
PER_RANK_ROWS = 16
"""Ranks listed one by one up to this many; beyond, their spread."""


@contextlib.contextmanager
def _system_allocator_for_arrow() -> Iterator[None]:
    """Within it, Arrow's buffers from the C library's allocator, unless `ARROW_DEFAULT_MEMORY_POOL` names one: a
    trace of ~2M calls is ~1 GB of fresh buffers, and bundled mimalloc's page handling took ~1 CPU-s more system
    time to read them on the 2-core machine of `docs/benchmarks.md` (the fifth pass of `time_to_prediction.py`).
    The previous pool is restored after it, so an in-process caller (a test) keeps its own."""
    if settings.ARROW_MEMORY_POOL.get():
        yield
        return
    import pyarrow as pa

    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def predict_cmd(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="Run directory (emulated, imported or synthetic).")
    ],
    hardware: Annotated[
        str | None, hardware_option("to predict for (default: the trace's; measured kernels are re-priced)")
    ] = None,
    dp: Annotated[
        int | None,
        typer.Option(
            "--dp",
            min=1,
            help="Data-parallel degree to predict for (data-parallel traces): each rank replays a traced rank.",
        ),
    ] = None,
    cluster: CLUSTER = None,
    price_per_gpu_hour: Annotated[
        float | None, typer.Option(min=0, help="Price of one GPU-hour, for the cost figures.")
    ] = None,
    tokens_per_iteration: Annotated[
        float | None, typer.Option(min=0, help="Tokens the whole job processes per iteration.")
    ] = None,
    timeline: Annotated[Path | None, typer.Option(help="Write the simulated schedule as Perfetto JSON.")] = None,
    durations: DURATIONS = Durations.auto,
    estimator_version: ESTIMATOR_VERSION = "latest",
    warehouse: WAREHOUSE = None,
    burst_clock: Annotated[
        bool,
        typer.Option(
            "--no-sustained-clock",
            help="Price tensor-core kernels at the burst clock of the kernel measurements, not at the clock "
            "their mix sustains under the board's power cap (Hopper; estimated durations).",
        ),
    ] = False,
    as_json: JSON = False,
):
    """Predict iteration time, memory and cost of a traced run.

    Replays every rank on the event-driven simulator, optionally on another GPU, data-parallel degree or
    cluster (the changed assumptions are listed), and reports the iteration time and its breakdown, MFU,
    peak memory (and OOM) and cost. Estimated durations come with a 10-90% band of the iteration time,
    from the kernel and collective models' held-out residuals; a measured trace replayed unchanged reports
    the replay's error against its measured iteration time. The prediction is stored in the warehouse.
    """
    from maya.api import PredictOptions, predict, record
    from maya.core.hardware import UnknownHardware
    from maya.simulator import Deadlock, EstimatorsUnavailable, MissingDurations, MissingRanks
    from maya.simulator.oom import RecordedOutOfMemory
    from maya_trace_spec import TraceError

    with _system_allocator_for_arrow():
        try:
            options = PredictOptions(
                hardware=hardware,
                dp=dp,
                cluster=cluster,
                durations=durations.value,
                estimator_version=estimator_version,
                price_per_gpu_hour=price_per_gpu_hour,
                tokens_per_iteration=tokens_per_iteration,
                warehouse=warehouse,
                band=True,
                sustained_clock=not burst_clock,
                timeline=timeline,
            )
            prediction = predict(run_dir, options)
        except RecordedOutOfMemory as e:
            fail(str(e), EXIT_OOM)
        except (
            TraceError,
            MissingRanks,
            Deadlock,
            EstimatorsUnavailable,
            MissingDurations,
            UnknownHardware,
            ValueError,
        ) as e:
            fail(str(e))
        prediction_id = record(prediction, warehouse=warehouse)
        if as_json:
            sys.stdout.write(json.dumps({"prediction_id": prediction_id, **prediction.to_dict()}) + "\n")
            return
        print_prediction(prediction, prediction_id, timeline)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def print_prediction(p, prediction_id: str | None, timeline: Path | None, console: Console = out) -> None:
    """The prediction as `maya predict` shows it (also `maya demo`), on `console`."""
    t = Table(
        show_header=False, title=f"{Path(p.run_path).name} on {p.simulated_ranks} × {p.hardware}", title_justify="left"
    )
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("iteration time", _ms(p.iteration_ns))
    if p.band is not None:
        t.add_row("  10-90% band", f"{_ms(p.band['low_ns'])} … {_ms(p.band['high_ns'])}")
    if p.measured_iteration_ns is not None:
        t.add_row("measured iteration time", _ms(p.measured_iteration_ns))
    if p.replay_error is not None:
        t.add_row("replay error", f"{p.replay_error:+.2%}")
    for label, ns in (
        ("  compute", p.compute_ns),
        ("  exposed communication", p.exposed_comm_ns),
        ("  waiting for peers", p.peer_wait_ns),
        ("  host-bound", p.host_bound_ns),
        ("  idle", p.idle_ns),
    ):
        share = ns / p.iteration_ns if p.iteration_ns else 0.0
        t.add_row(label, f"{_ms(ns)}  ({share:5.1%})")
    t.add_row("MFU (model FLOPs)", f"{p.mfu:.1%} of {p.mfu_dtype} peak")
    t.add_row("HFU (hardware FLOPs)", f"{p.hfu:.1%} of {p.mfu_dtype} peak")
    t.add_row("peak memory (held)", f"{_gib(p.peak_memory_bytes)} of {_gib(p.memory_capacity_bytes)}")
    if p.peak_allocated_bytes is not None:
        t.add_row("  allocated to tensors", _gib(p.peak_allocated_bytes))
    t.add_row("headroom", _gib(p.headroom_bytes))
    t.add_row("predicted OOM", f"[red]yes[/] ({p.oom_reason})" if p.oom else "[green]no[/]")
    if p.tokens_per_s is not None:
        t.add_row("throughput", f"{p.tokens_per_s:,.0f} tokens/s")
    if p.cost_per_iteration is not None:
        t.add_row("cost per iteration", f"${p.cost_per_iteration:.4g}")
    if p.cost_per_million_tokens is not None:
        t.add_row("cost per million tokens", f"${p.cost_per_million_tokens:.4g}")
    t.add_row("iterations", f"{p.steady_iterations} steady of {p.iterations} ({p.iteration_source})")
    t.add_row("durations", p.durations)
    console.print(t)
    if 1 < len(p.ranks) <= PER_RANK_ROWS:
        console.print(_rank_table(p.ranks))
    elif len(p.ranks) > PER_RANK_ROWS:
        times = [r.iteration_ns for r in p.ranks]
        console.print(
            f"{len(p.ranks)} ranks: iteration {_ms(min(times))} … {_ms(max(times))}, slowest rank {p.critical_rank}"
        )
    if p.assumptions:
        console.print("changed assumptions:", style="bold")
        for assumption in p.assumptions:
            console.print(f"  - {assumption}", highlight=False)
    for note in p.notes:
        console.print(f"note: {note}", style="dim", highlight=False)
    from maya.api.memory import snapshots

    if snapshots(p.run_path):
        console.print(
            f"note: what holds the peak memory, from the run's allocator history: maya memory {p.run_path}",
            style="dim",
            highlight=False,
        )
    stored = f"; prediction {prediction_id}" if prediction_id else ""
    console.print(f"simulated {p.simulated_calls:,} calls in {p.simulation_s:.2f} s{stored}", style="dim")
    if timeline is not None:
        console.print(f"timeline: [cyan]{timeline}[/] (open in https://ui.perfetto.dev)")


RANK_TIMES = (
    ("compute", "compute_ns"),
    ("exposed comm", "exposed_comm_ns"),
    ("peer wait", "peer_wait_ns"),
    ("host-bound", "host_bound_ns"),
    ("idle", "idle_ns"),
)


def _rank_table(ranks: Sequence[Any]) -> Table:
    """One row per rank of a prediction's `ranks` (a single rank's figures are the summary's); a time that is zero
    on every rank is left out and named in the caption."""
    shown = [(name, field) for name, field in RANK_TIMES if any(getattr(r, field) for r in ranks)]
    zero = [name for name, field in RANK_TIMES if (name, field) not in shown]
    table = Table(
        "rank",
        "iteration",
        *(name for name, _ in shown),
        "MFU",
        "peak memory",
        caption=f"zero on every rank: {', '.join(zero)}" if zero else None,
    )
    for r in ranks:
        table.add_row(
            str(r.rank),
            _ms(r.iteration_ns),
            *(_ms(getattr(r, field)) for _, field in shown),
            f"{r.mfu:.1%}",
            _gib(r.peak_memory_bytes),
        )
    return table
