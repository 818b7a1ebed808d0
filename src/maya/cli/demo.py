"""`maya demo`: Maya's main job on the embedded defaults, end to end.

The bundled example (a small GPT, bf16) is emulated unchanged on a virtual H100; the kernel
estimators are trained on the shipped measurements if the warehouse holds no version yet; the
simulator predicts the iteration time, memory and cost; SQL over the trace and the warehouse shows
what was captured; the simulated schedule is written as a Perfetto timeline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from maya.core.hardware import DEFAULT_HARDWARE
from maya.core.paths import example_script, runs_dir, warehouse_path

from .common import WAREHOUSE, out, out_option
from .predict import print_prediction

EXAMPLE_ARGS = [
    "--bf16",
    "--steps",
    "4",
    "--dim",
    "512",
    "--layers",
    "4",
    "--heads",
    "8",
    "--seq",
    "512",
    "--batch",
    "8",
]
TRAINING_SAMPLE = 20_000  # rows of the shipped measurements: well under a minute to train on 2 cores
QUERIES = {
    "Device calls per iteration and phase (emulated trace)": """
        SELECT o.iteration, o.phase, count(*) AS calls, count(a.gemm_m) AS gemms,
               count(a.kernel_id) AS kernel_launches
        FROM api_calls a JOIN ops o USING (rank, op_id)
        WHERE o.iteration BETWEEN 1 AND 3 GROUP BY ALL ORDER BY ALL""",
    "Largest GEMMs (cuBLAS m, n, k) and the layer that made them": """
        SELECT DISTINCT a.gemm_m AS m, a.gemm_n AS n, a.gemm_k AS k, a.gemm_dtype_a AS dtype, o.module_path
        FROM api_calls a JOIN ops o USING (rank, op_id)
        WHERE a.gemm_m IS NOT NULL AND o.iteration = 1 AND o.phase = 'forward'
        ORDER BY m * n * k DESC LIMIT 6""",
}


def run_demo(
    console: Console,
    out_dir: Path | None = None,
    training_sample: int = TRAINING_SAMPLE,
    warehouse: Path | None = None,
) -> Path:
    from maya.api import EmulateOptions, PredictOptions, capture, predict, record
    from maya.core.warehouse import register_run

    run_dir = out_dir or runs_dir() / time.strftime("demo-%Y%m%d-%H%M%S")
    script = example_script()
    console.rule("[bold]Maya demo")
    console.print(f"1. emulating the bundled [cyan]{script.name}[/] ({' '.join(EXAMPLE_ARGS)}) on a virtual H100")
    with console.status("running the unmodified script on a virtual GPU..."):
        captured = capture([str(script), *EXAMPLE_ARGS], EmulateOptions(hardware=DEFAULT_HARDWARE), out_dir=run_dir)
    if not captured.ok:
        raise RuntimeError(f"the example did not complete under emulation: {captured.reason}")
    rank = captured.ranks[0]
    console.print(
        f"   {rank.calls:,} device-API calls captured in {rank.seconds:.1f} s -> [cyan]{run_dir}[/] "
        f"(run {register_run(run_dir, warehouse)})"
    )
    version = _estimator_version(console, training_sample, warehouse)
    console.print(f"3. predicting with estimator version [cyan]{version}[/] and the event-driven simulator")
    timeline = run_dir.with_name(run_dir.name + ".timeline.json")
    options = PredictOptions(
        durations="estimators",
        estimator_version=version,
        price_per_gpu_hour=3.0,
        tokens_per_iteration=8 * 511,
        timeline=timeline,
        warehouse=warehouse,
    )
    prediction = predict(run_dir, options)
    print_prediction(prediction, record(prediction, warehouse=warehouse), None, console)
    from maya.core.sql import run_query

    console.print("4. read-only SQL over the trace:")
    for title, sql in QUERIES.items():
        r = run_query(sql, trace=run_dir, warehouse=warehouse)
        table = Table(*r.columns, title=title, title_justify="left")
        for row in r.rows:
            table.add_row(*(str(v) for v in row))
        console.print(table)
    console.print(
        f"5. simulated schedule: [cyan]{timeline}[/] (open in https://ui.perfetto.dev); warehouse: {warehouse or warehouse_path()}"
    )
    return run_dir


def _estimator_version(console: Console, sample: int, warehouse: Path | None) -> str:
    """The latest registered estimator version, training one on the shipped data if there is none."""
    from maya.estimators import Registry, RegistryError, TrainConfig, train_version
    from maya.estimators.training_data import shipped_measurements

    registry = Registry(warehouse)
    try:
        version = registry.get("latest").version
        registry.load(version)  # its artifact is there and intact, or a version is trained below
        console.print(f"2. kernel estimators: using registered version [cyan]{version}[/]")
        return version
    except RegistryError:
        pass
    measurements = shipped_measurements()
    measurements = measurements.sample(min(sample, len(measurements)), random_state=0).reset_index(drop=True)
    with console.status(f"2. training kernel estimators on {len(measurements):,} shipped measurements..."):
        registered = train_version(measurements, TrainConfig(), registry)
    console.print(
        f"2. kernel estimators: trained and registered version [cyan]{registered.record.version}[/] "
        f"on {len(measurements):,} shipped measurements"
    )
    return registered.record.version


def demo_cmd(
    out_dir: Annotated[
        Path | None, out_option("Run directory to write (default: a new one in $MAYA_HOME/runs).")
    ] = None,
    training_sample: Annotated[
        int, typer.Option(min=1000, help="Shipped measurements to train the estimators on when none are registered.")
    ] = TRAINING_SAMPLE,
    warehouse: WAREHOUSE = None,
):
    """Run Maya's main job end to end on the bundled example.

    Emulates the bundled example (a small GPT, bf16) unchanged on a virtual H100, trains the kernel
    estimators on the shipped measurements if the warehouse holds no version yet, predicts the iteration
    time, memory and cost, shows what the trace captured with SQL and writes the simulated schedule as a
    Perfetto timeline.
    """
    run_demo(out, out_dir, training_sample, warehouse)
