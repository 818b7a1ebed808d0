"""`maya profile`: measure kernels and whole training scripts on a real GPU (torch.profiler)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from maya.profiler.kernels.request import DEFAULT_BUDGET_MIN
from maya_trace_spec import TraceError

from .common import SCRIPT_COMMAND, fail, out, script_argv

profile_app = typer.Typer(help="Profile real devices with torch.profiler.", no_args_is_help=True)


@profile_app.command("workload", context_settings=SCRIPT_COMMAND)
def profile_workload_cmd(
    ctx: typer.Context,
    out_dir: Annotated[
        Path,
        typer.Option("--out", "-o", help="Run directory to write (trace), or results directory (--measure, --suite)."),
    ],
    hardware: Annotated[str | None, typer.Option(help="Hardware catalog name.")] = None,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Ground truth: time warm-up + "
            "measured iterations (CUDA events), memory peaks, "
            "OOM, a trace of 2 more iterations.",
        ),
    ] = False,
    name: Annotated[
        str | None, typer.Option(help="Config name of a --measure run (default: the script's name).")
    ] = None,
    suite: Annotated[
        Path | None,
        typer.Option(
            help="Suite file (.py defining CONFIGS, or "
            ".json): measure its configs not yet "
            "in --out, each in a fresh process."
        ),
    ] = None,
    config: Annotated[str | None, typer.Option(help="Only this config of the --suite, in this process.")] = None,
    budget_min: Annotated[float, typer.Option("--budget-min", help="Suite time budget in minutes.")] = 8.0,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations.")] = 5,
    iterations: Annotated[int, typer.Option(help="Measured iterations.")] = 10,
    iterations_by: Annotated[
        str | None,
        typer.Option(
            "--iterations-by",
            help="Dotted path of the function whose calls end iterations, for "
            "scripts without an optimizer (e.g. torch.Tensor.backward).",
        ),
    ] = None,
):
    """Run `-- python SCRIPT ARGS` under torch.profiler and store the measured trace; with --measure or
    --suite, measure ground truth (iteration times, memory peaks, a 2-iteration trace) instead."""
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
            iterations,
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
    out.print(f"profiled {' '.join(argv)} into {run_dir} (run {register_run(run_dir)})")


@profile_app.command("kernels")
def profile_kernels_cmd(
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Campaign directory (created or resumed).")],
    families: Annotated[str | None, typer.Option(help="Comma-separated kernel families (default: all).")] = None,
    budget_min: Annotated[
        float, typer.Option("--budget-min", help="Stop cleanly before this many minutes.")
    ] = DEFAULT_BUDGET_MIN,
    seed: Annotated[int, typer.Option(help="Seed of the sweep order.")] = 0,
    hardware: Annotated[str | None, typer.Option(help="Hardware catalog name.")] = None,
    device: Annotated[str, typer.Option(help="cuda, or cpu to exercise the measurement loop only.")] = "cuda",
    plan: Annotated[bool, typer.Option("--plan", help="Print the configs left to measure and exit.")] = False,
):
    """Measure GPU kernels over a sweep of real training shapes (resumable; stops before the budget)."""
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
