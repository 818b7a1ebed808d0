"""Predict a run: load → re-target (GPU, data-parallel degree, cluster) → `simulate` (simulation.py) → report
(`summarize`, with the notes of notes.py) (→ band, timeline; storing it is the caller's: `maya.api.record`).
`replay` keeps the replays with the prediction; `predict` gives the prediction alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maya.core import hardware as catalog
from maya.core.hardware import Hardware

from .device_time import timing_notes
from .durations import DurationProvider
from .notes import (
    child_process_notes,
    dedup_notes,
    evaluation_notes,
    flash_attn_notes,
    flex_mask_notes,
    grouped_gemm_notes,
    host_notes,
    megablocks_notes,
    out_of_memory,
    routing_notes,
    stage_rebuild_notes,
    stand_in_notes,
    subset_notes,
    te_kernel_notes,
    triton_user_notes,
)
from .oom import check_stopped_by_oom
from .program import forget_rebuilt_frame
from .report import (
    Prediction,
    allocator_peak,
    allocator_peaks,
    job_figures,
    measured_iteration,
    memory_peak,
    mfu_dtype,
    rank_reports,
)
from .retarget import gpu_assumption, retarget, source_hardware
from .simulation import Simulation, simulate
from .timeline import write_timeline
from .trace import TraceSet, forget_rebuilt_tables, interrupted_by, keep_complete_iterations, load

if TYPE_CHECKING:
    from .band import IterationBand

TIMELINE_RANKS = 64


def resolve_hardware(traces: TraceSet, name: str | None) -> Hardware:
    """The named GPU, else the one the trace was captured or measured on."""
    if name:
        return catalog.get(name)
    source = source_hardware(traces)
    if source is None:
        named = (
            f"the trace's hardware {traces.hardware!r} is not in the catalog"
            if traces.hardware
            else "the trace names no hardware"
        )
        raise ValueError(f"{named}: pass --hardware (a catalog name, or the file describing the part)")
    return source


def summarize(
    sim: Simulation,
    *,
    tokens_per_iteration: float | None = None,
    price_per_gpu_hour: float | None = None,
    assumptions: list[str] | None = None,
) -> Prediction:
    """The prediction of a replay: per-rank and job figures, memory, OOM and cost; for measured traces the
    measured iteration time and, when nothing was re-targeted (`assumptions` and the GPU), the replay's
    error against it."""
    traces, hw = sim.traces, sim.hardware
    dtype = mfu_dtype(p.frame for p in sim.programs.values())
    peak = hw.peak_flops(dtype)
    memory = {rank: memory_peak(trace) for rank, trace in traces.ranks.items()}
    reports = rank_reports(
        sim.replicas, sim.results, sim.devices, sim.iterations, peak, {rank: m for rank, (m, _) in memory.items()}
    )
    job = job_figures(
        reports,
        int(traces.info["world_size"]),
        peak,
        tokens_per_iteration=tokens_per_iteration,
        price_per_gpu_hour=price_per_gpu_hour,
    )
    peak_memory = max((m for m, _ in memory.values()), default=0)
    oom_reason, retry_note = out_of_memory(traces, memory, peak_memory, hw)
    first = sim.iterations[min(sim.iterations)]
    notes = list(sim.notes) + ([retry_note] if retry_note else [])
    by = interrupted_by(traces)
    if by:
        notes.append(
            f"the capture was interrupted by {by}: predicted from the iterations every rank completed before "
            f"it ({first.count} found, {len(first.steady)} steady)"
        )
    elif traces.info["status"] not in ("complete", "oom"):
        notes.append(f"the trace's capture status is {traces.info['status']!r}: the program may be incomplete")
    notes += stand_in_notes(traces) + routing_notes(traces) + flex_mask_notes(traces) + subset_notes(traces)
    notes += dedup_notes(traces) + stage_rebuild_notes(traces)
    notes += child_process_notes(traces)
    notes += te_kernel_notes(traces) + flash_attn_notes(traces) + grouped_gemm_notes(traces) + megablocks_notes(traces)
    notes += triton_user_notes(traces)
    notes += evaluation_notes(sim)
    notes += host_notes(sim, job["iteration_ns"], job["host_bound_ns"])
    notes += timing_notes(traces, hw.name)
    assumptions = [*(assumptions or []), *gpu_assumption(traces, hw, sim.provider)]
    measured = [measured_iteration(traces.ranks[rank], sim.iterations[rank]) for rank in sim.programs]
    measured_ns = max(measured) if measured and None not in measured else None
    replay_error = (
        job["iteration_ns"] / measured_ns - 1.0
        if measured_ns and sim.provider.replays_measured_kernels and not assumptions
        else None
    )
    return Prediction(
        run_id=traces.run_id,
        run_path=str(Path(traces.path).resolve()),
        hardware=hw.name,
        durations=sim.provider.name,
        world_size=int(traces.info["world_size"]),
        simulated_ranks=len(sim.replicas),
        captured_ranks=sum("rebuilt_from" not in t.device for t in traces.ranks.values()),
        iterations=first.count,
        steady_iterations=len(first.steady),
        iteration_source=first.source,
        mfu_dtype=dtype,
        peak_memory_bytes=peak_memory,
        peak_allocated_bytes=allocator_peak(traces),
        allocated_peaks_by_rank=allocator_peaks(traces) or None,
        memory_capacity_bytes=hw.memory_bytes,
        headroom_bytes=hw.memory_bytes - peak_memory,
        oom=oom_reason is not None,
        oom_reason=oom_reason,
        tokens_per_iteration=tokens_per_iteration,
        price_per_gpu_hour=price_per_gpu_hour,
        simulated_calls=sim.calls,
        simulation_s=sim.seconds,
        ranks=reports,
        notes=notes,
        assumptions=assumptions,
        measured_iteration_ns=measured_ns,
        replay_error=replay_error,
        **job,
    )


def add_band(sim: Simulation, prediction: Prediction) -> IterationBand | None:
    """Set the prediction's 10–90% band (`band.iteration_band`) and return it, or note why it has none."""
    from .band import iteration_band

    found = iteration_band(sim, prediction)
    if found is None:
        prediction.notes.append(f"no 10-90% band: durations from {sim.provider.name} carry no held-out residuals")
        return None
    prediction.band = found.to_dict()
    prediction.notes.append(found.discrepancy.meaning)
    if found.unmodelled_share >= 0.1:
        prediction.notes.append(
            f"{found.unmodelled_share:.0%} of the iteration is outside the band's error model "
            "(host time, kernels priced with no held-out residuals): held fixed in it"
        )
    if found.composed_share >= 0.1:
        prediction.notes.append(
            f"{found.composed_share:.0%} of the iteration is in composed kernels (fused "
            "attention): the band varies the GEMMs they are priced from and, where public measurements price "
            "the kernel (FlashAttention-2, CUTLASS, FlexAttention, llm-foundry's Triton), that model's held-out "
            "residuals; cuDNN's attention, never measured, carries its GEMMs' band alone"
        )
    return found


@dataclass(frozen=True)
class Replay:
    """A prediction with the replays it was made from: the `Simulation` (every call's simulated times) and, when
    a band was asked for and could be given, the band (its low and high replays: `band.simulations`)."""

    prediction: Prediction
    simulation: Simulation
    band: IterationBand | None = None


def replay(
    run_dir: str | Path,
    *,
    hardware: str | None = None,
    durations: DurationProvider | str = "auto",
    price_per_gpu_hour: float | None = None,
    tokens_per_iteration: float | None = None,
    timeline: str | Path | None = None,
    model_version: str = "latest",
    cluster: str | None = None,
    dp: int | None = None,
    warehouse: str | Path | None = None,
    band: bool = False,
    contention: bool = True,
    sustained_clock: bool = True,
) -> Replay:
    """Predict a run, optionally re-targeted to another GPU (`hardware`), data-parallel degree (`dp`) or
    cluster. Stores nothing (`store.store_prediction` does; `warehouse` is where estimator versions are looked
    up); the one file it writes is the `timeline`, when asked. With `band`, the prediction carries the 10–90%
    band of its iteration time (`band.iteration_band`: two more replays). The timeline shows every rank of
    jobs up to `TIMELINE_RANKS` ranks, else the captured ones. `contention`, `sustained_clock`: see `simulate`."""
    traces = load(run_dir)
    if not traces.ranks:
        raise ValueError(f"{run_dir}: the run has no api_calls (nothing was captured)")
    check_stopped_by_oom(traces)
    keep_complete_iterations(traces)
    hw = resolve_hardware(traces, hardware)
    if dp is not None and dp == int(traces.info["world_size"]):
        dp = None
    traces, assumptions = retarget(traces, hw, dp=dp, cluster=cluster)
    sim = simulate(
        traces,
        hw,
        durations,
        model_version=model_version,
        cluster=cluster,
        warehouse=warehouse,
        reprice_collectives=bool(assumptions),
        contention=contention,
        sustained_clock=sustained_clock,
    )
    prediction = summarize(
        sim, tokens_per_iteration=tokens_per_iteration, price_per_gpu_hour=price_per_gpu_hour, assumptions=assumptions
    )
    found = add_band(sim, prediction) if band else None
    if timeline is not None:
        captured = {r.rank for r in sim.replicas if r.captured}
        write_timeline(
            timeline,
            sim.replicas,
            sim.results,
            sim.devices,
            traces,
            ranks=None if len(sim.replicas) <= TIMELINE_RANKS else captured,
        )
    forget_rebuilt_tables()  # a later prediction in this process does not start with this one's stage held
    forget_rebuilt_frame()
    return Replay(prediction, sim, found)


def predict(run_dir: str | Path, **options: Any) -> Prediction:
    """The prediction of `replay` (the same keywords)."""
    return replay(run_dir, **options).prediction
