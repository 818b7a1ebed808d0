"""The kernel profiling campaign (`maya.profiler`) on this code location's GPU, into
`<profiles>/<hardware>/kernels-<YYYY-MM>/` (resumed all month), which the profile_campaigns sensor
ingests as that (hardware, campaign) raw partition. Without a GPU it skips and says why."""

from datetime import date

import dagster as dg
from pydantic import Field

from maya.core import hardware
from maya.profiler.kernels.request import DEFAULT_BUDGET_MIN, CampaignRequest

from ..resources import DataSources


class CampaignConfig(dg.Config):
    budget_min: float = Field(DEFAULT_BUDGET_MIN, description="Stop cleanly before this many minutes.")
    families: list[str] = Field([], description="Kernel families to measure (default: all).")
    seed: int = Field(0, description="Seed of the sweep order.")
    campaign: str | None = Field(None, description="Campaign directory name (default kernels-<YYYY-MM>).")


def gpu_missing() -> str | None:
    """Why no campaign can run on this host (None when it has a CUDA device)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed on this code location's host"
    if not torch.cuda.is_available():
        return "no CUDA device on this code location's host (torch.cuda.is_available() is False)"
    return None


@dg.op
def profile_kernels(context: dg.OpExecutionContext, config: CampaignConfig, data: DataSources) -> dg.Output[str]:
    missing = gpu_missing()
    if missing:
        context.log.warning(f"profiling campaign skipped: {missing}")
        return dg.Output(f"skipped: {missing}", metadata={"skipped": missing})
    import torch

    from maya.profiler.kernels.campaign_store import CampaignMismatch

    try:
        gpu = hardware.get(torch.cuda.get_device_name()).name
    except hardware.UnknownHardware as e:
        raise dg.Failure(f"{e}: add the GPU to data/hardware/catalog.json first") from None
    root = data.profiles / gpu / (config.campaign or f"kernels-{date.today():%Y-%m}")
    try:
        request = CampaignRequest.make(
            root, config.families or None, budget_min=config.budget_min, seed=config.seed, hardware=gpu
        )
    except ValueError as e:
        raise dg.Failure(str(e)) from None
    try:
        result = request.run(log=context.log.info)
    except CampaignMismatch as e:
        raise dg.Failure(str(e)) from None
    summary = "\n".join(result.summary_lines())
    if result.stop_reason == "cuda-error":
        raise dg.Failure(f"the campaign stopped on a CUDA error; what it measured is kept in {root}\n{summary}")
    return dg.Output(
        summary,
        metadata={
            "campaign_dir": dg.MetadataValue.path(str(root)),
            "stop_reason": result.stop_reason,
            "done": f"{result.done}/{result.total}",
        },
    )


@dg.job(description="Measure GPU kernels on this host into the profiles directory (skips without a GPU).")
def profiling_campaign() -> None:
    profile_kernels()


@dg.schedule(job=profiling_campaign, cron_schedule="0 1 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def nightly_profiling_campaign(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    missing = gpu_missing()
    return dg.SkipReason(f"no profiling campaign: {missing}") if missing else dg.RunRequest()
