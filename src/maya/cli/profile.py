"""`maya profile`: measure kernels and whole training scripts on a real GPU (torch.profiler)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from maya.profiler.kernels.request import DEFAULT_BUDGET_MIN
from maya_trace_spec import TraceError

from .common import SCRIPT_COMMAND, SCRIPT_USAGE, WAREHOUSE, command, fail, out, out_option, script_argv

profile_app = typer.Typer(help="Measure kernels and training scripts on a real GPU.", no_args_is_help=True)
HARDWARE_HELP = "GPU being measured: a name listed by maya hardware."


@profile_app.command(
    "workload",
    context_settings=SCRIPT_COMMAND,
    options_metavar=SCRIPT_USAGE,
    cls=command({"--iterations": "--measured-iterations"}),
)
def profile_workload_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, out_option("Run directory to write (a trace), or results directory (--measure, --suite).")
    ],
    hardware: Annotated[str | None, typer.Option(help=HARDWARE_HELP)] = None,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Ground truth: time warm-up and measured iterations (CUDA events), memory peaks, OOM, and "
            "trace 2 more iterations.",
        ),
    ] = False,
    name: Annotated[
        str | None, typer.Option(help="Config name of a --measure run (default: the script's name).")
    ] = None,
    suite: Annotated[
        Path | None,
        typer.Option(
            help="Suite file (.py defining CONFIGS, or .json): measure its configs not yet in --out, each in a "
            "fresh process."
        ),
    ] = None,
    config: Annotated[str | None, typer.Option(help="Only this config of the --suite, in this process.")] = None,
    budget_min: Annotated[float, typer.Option("--budget-min", help="Suite time budget in minutes.")] = 8.0,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations.")] = 5,
    measured_iterations: Annotated[int, typer.Option(help="Iterations timed after the warm-up.")] = 10,
    iterations_by: Annotated[
        str | None,
        typer.Option(
            "--iterations-by",
            help="Dotted path of the function whose calls end iterations, for scripts without an optimizer "
            "(e.g. torch.Tensor.backward).",
        ),
    ] = None,
    warehouse: WAREHOUSE = None,
):
    """Profile a training script on a real GPU and store its trace.

    `maya profile workload [OPTIONS] -- python SCRIPT ARGS` runs the script under torch.profiler. With
    --measure or --suite it measures ground truth instead (iteration times, memory peaks, a 2-iteration
    trace).
    """
    if measure or suite is not None:
        from maya.profiler.workloads.cli import UsageError, WorkloadRequest, run_request

        request = WorkloadRequest(
            out_dir,
            script_argv(ctx.args) if ctx.args or suite is None else [],
            hardware,
            measure,
            name,
            suite,
            config,
            budget_min,
            warmup,
            measured_iterations,
            iterations_by,
        )
        try:
            code = run_request(request, log=lambda line: out.print(line, markup=False, highlight=False, soft_wrap=True))
        except UsageError as e:
            fail(str(e), 2)
        except (ValueError, FileExistsError) as e:
            fail(str(e))
        raise typer.Exit(code)
    from maya.core.warehouse import register_run
    from maya.profiler.workloads.trace import profile_workload

    argv = script_argv(ctx.args)
    try:
        run_dir = profile_workload(argv, out_dir, hardware=hardware)
    except (TraceError, FileExistsError) as e:
        fail(str(e))
    out.print(f"profiled {' '.join(argv)} into {run_dir} (run {register_run(run_dir, warehouse)})")


@profile_app.command("kernels")
def profile_kernels_cmd(
    out_dir: Annotated[Path, out_option("Campaign directory (created or resumed).")],
    families: Annotated[str | None, typer.Option(help="Comma-separated kernel families (default: all).")] = None,
    budget_min: Annotated[
        float, typer.Option("--budget-min", help="Stop cleanly before this many minutes.")
    ] = DEFAULT_BUDGET_MIN,
    seed: Annotated[int, typer.Option(help="Seed of the sweep order.")] = 0,
    hardware: Annotated[str | None, typer.Option(help=HARDWARE_HELP)] = None,
    device: Annotated[str, typer.Option(help="cuda, or cpu to exercise the measurement loop only.")] = "cuda",
    plan: Annotated[bool, typer.Option("--plan", help="Print the configs left to measure and exit.")] = False,
):
    """Measure GPU kernels over a sweep of real training shapes.

    Resumable: a campaign directory given again goes on where it stopped; it stops cleanly before the
    budget.
    """
    from maya.profiler.kernels.campaign import NoDevice
    from maya.profiler.kernels.campaign_store import CampaignMismatch
    from maya.profiler.kernels.request import CampaignRequest

    try:
        request = CampaignRequest.make(
            out_dir, families, budget_min=budget_min, seed=seed, hardware=hardware, device=device
        )
    except ValueError as e:
        fail(str(e), 2)
    if plan:
        for line in request.plan_lines():
            out.print(line, markup=False, highlight=False)
        return
    try:
        result = request.run(log=lambda line: out.print(line, markup=False, highlight=False))
    except (NoDevice, CampaignMismatch) as e:
        fail(str(e))
    for line in result.summary_lines():
        out.print(line, markup=False, highlight=False)
    if result.stop_reason == "cuda-error":
        raise typer.Exit(1)
