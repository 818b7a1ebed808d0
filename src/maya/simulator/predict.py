"""`simulate` a trace and turn it into a `Prediction`: load → re-target (GPU, data-parallel degree, cluster)
→ compile → expand deduplicated ranks → price → replay → report (→ timeline, warehouse)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maya.core import hardware as catalog
from maya.core.hardware import Hardware

from .contention import contend
from .device_time import TIMING_API, timing_notes
from .durations import DurationProvider, MeasuredDurations, RooflineDurations, is_measured
from .durations.estimated import CollectiveDurations, EstimatorDurations, EstimatorsUnavailable, cluster_spec
from .engine import Engine, RankResult
from .iterations import Iterations, detect, evaluating
from .oom import check_stopped_by_oom, recorded_ooms
from .opcodes import classify
from .pricing import price
from .program import Program, compile_rank
from .report import Prediction, job_figures, measured_iteration, memory_peak, mfu_dtype, rank_report
from .retarget import RepricedDurations, gpu_assumption, retarget, source_hardware
from .store import store_prediction
from .timeline import write_timeline
from .topology import GlobalComm, Replica, expand
from .trace import TraceSet, interrupted_by, keep_complete_iterations, load

DURATION_CHOICES = ("auto", "estimators", "roofline", "measured")
TIMELINE_RANKS = 64


@dataclass
class Simulation:
    traces: TraceSet
    hardware: Hardware
    provider: DurationProvider
    programs: dict[int, Program]
    iterations: dict[int, Iterations]
    replicas: list[Replica]
    comms: list[GlobalComm]
    devices: list[np.ndarray]
    results: list[RankResult]
    seconds: float
    """Wall time of the replays (event loops)."""
    notes: list[str]
    replays: int = 1
    """Event-loop passes: 2 when the collectives' contention re-timed the kernels."""

    @property
    def calls(self) -> int:
        """Calls replayed, over all simulated ranks."""
        return sum(r.program.n for r in self.replicas)

    def result(self, rank: int) -> RankResult:
        return next(res for res in self.results if res.rank == rank)


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


def make_provider(
    choice: str,
    traces: TraceSet,
    hardware: Hardware | None = None,
    *,
    model_version: str = "latest",
    cluster: str | None = None,
    warehouse: str | Path | None = None,
    reprice_collectives: bool = False,
) -> tuple[DurationProvider, list[str]]:
    """The provider for `--durations` and notes on the choice. auto: the trace's measured durations when every
    device call has one, else the latest estimators, else the roofline. Measured durations replayed on
    another GPU than the measured one (`hardware`), or with collectives re-targeted (`reprice_collectives`:
    another data-parallel degree or cluster), are re-priced (`RepricedDurations`)."""
    if choice not in DURATION_CHOICES:
        raise ValueError(f"unknown durations {choice!r}; choose from {', '.join(DURATION_CHOICES)}")
    if choice == "roofline":
        return RooflineDurations(), []
    if choice == "estimators":
        return EstimatorDurations(model_version, cluster=cluster, warehouse=warehouse), []
    measured = all(is_measured(t.calls.assign(opcode=classify(t.calls))) for t in traces.ranks.values())
    if measured or choice == "measured":
        notes = ["durations: measured in the trace"] if choice == "auto" else []
        source = source_hardware(traces)
        if source is None and hardware is not None:
            notes.append("the trace names no GPU: kernel durations kept as measured")
            source = hardware
        other_gpu = hardware is not None and source.name != hardware.name
        if not other_gpu and not reprice_collectives:
            return MeasuredDurations(), notes
        kernels: DurationProvider | None = None
        if other_gpu:
            try:
                kernels = EstimatorDurations(model_version, cluster=cluster, warehouse=warehouse)
            except EstimatorsUnavailable as e:
                kernels = RooflineDurations()
                notes.append(f"{e}; kernels re-priced by the analytical roofline")
        collectives = CollectiveDurations(cluster) if reprice_collectives else None
        return RepricedDurations(source, kernels, collectives), notes
    try:
        return EstimatorDurations(model_version, cluster=cluster, warehouse=warehouse), []
    except EstimatorsUnavailable as e:
        return RooflineDurations(), [f"{e}; durations from the analytical roofline"]


def simulate(
    traces: TraceSet,
    hardware: Hardware,
    provider: DurationProvider | str = "auto",
    *,
    model_version: str = "latest",
    cluster: str | None = None,
    warehouse: str | Path | None = None,
    reprice_collectives: bool = False,
    contention: bool = True,
) -> Simulation:
    """Replay every rank of `traces` on `hardware` with `provider` (or a `--durations` choice; measured
    collectives are re-priced with `reprice_collectives`, for a re-targeted degree or cluster). With
    `contention`, kernels running beside a collective are slowed by the SMs and bandwidth NCCL takes
    (`contention`: a second replay), unless the kernel durations were measured, as they are or scaled to
    another GPU (they hold it already)."""
    programs = {rank: compile_rank(trace) for rank, trace in traces.ranks.items()}
    notes: list[str] = []
    if isinstance(provider, str):
        provider, notes = make_provider(
            provider,
            traces,
            hardware,
            model_version=model_version,
            cluster=cluster,
            warehouse=warehouse,
            reprice_collectives=reprice_collectives,
        )
    replicas, comms = expand(traces, programs)
    devices = price(traces, replicas, comms, provider, hardware)
    notes += getattr(provider, "notes", [])
    iterations = {rank: detect(traces.ranks[rank], p.opcodes) for rank, p in programs.items()}
    by = interrupted_by(traces)
    whole = [rank for rank, found in iterations.items() if found.source == "whole"]
    if by and whole:
        raise ValueError(
            f"{traces.path}: the capture was interrupted by {by} and rank {whole[0]}'s calls show no complete "
            "iteration (no optimizer step, no repeated sequence): there is nothing to predict from; capture it "
            "again and let it run longer"
        )
    engine = Engine(replicas, devices, comms, shortest_collective=provider.collective_includes_wait)
    t0 = time.perf_counter()
    results = engine.run()
    seconds, replays = time.perf_counter() - t0, 1
    if contention and not isinstance(provider, (MeasuredDurations, RepricedDurations)):
        contended = contend(traces, replicas, comms, devices, results, hardware, cluster_spec(cluster, hardware))
        if contended is not devices:
            devices = contended
            engine = Engine(replicas, devices, comms, shortest_collective=provider.collective_includes_wait)
            t0 = time.perf_counter()
            results = engine.run()
            seconds, replays = seconds + time.perf_counter() - t0, 2
    return Simulation(
        traces, hardware, provider, programs, iterations, replicas, comms, devices, results, seconds, notes, replays
    )


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
    dtype = mfu_dtype([p.frame for p in sim.programs.values()])
    peak = hw.peak_flops(dtype)
    memory = {rank: memory_peak(trace) for rank, trace in traces.ranks.items()}
    reports = [
        rank_report(res, rep.program, dev, sim.iterations[rep.program.rank], peak, memory[rep.program.rank][0])
        for rep, res, dev in zip(sim.replicas, sim.results, sim.devices)
    ]
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
    notes += stand_in_notes(traces) + routing_notes(traces) + subset_notes(traces) + evaluation_notes(sim)
    notes += timing_notes(traces, hw.name)
    assumptions = [*(assumptions or []), *gpu_assumption(traces, hw, sim.provider)]
    measured = [measured_iteration(traces.ranks[rank], sim.iterations[rank]) for rank in sim.programs]
    measured_ns = max(measured) if measured and None not in measured else None
    replay_error = (
        job["iteration_ns"] / measured_ns - 1.0
        if measured_ns and isinstance(sim.provider, MeasuredDurations) and not assumptions
        else None
    )
    return Prediction(
        run_id=traces.run_id,
        run_path=str(Path(traces.path).resolve()),
        hardware=hw.name,
        durations=sim.provider.name,
        world_size=int(traces.info["world_size"]),
        simulated_ranks=len(sim.replicas),
        captured_ranks=len(sim.programs),
        iterations=first.count,
        steady_iterations=len(first.steady),
        iteration_source=first.source,
        mfu_dtype=dtype,
        peak_memory_bytes=peak_memory,
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


def add_band(sim: Simulation, prediction: Prediction) -> None:
    """Set the prediction's 10–90% band (`band.iteration_band`), or note why it has none."""
    from .band import iteration_band

    found = iteration_band(sim, prediction)
    if found is None:
        prediction.notes.append(f"no 10-90% band: durations from {sim.provider.name} carry no held-out residuals")
        return
    prediction.band = found.to_dict()
    if found.unmodelled_share >= 0.1:
        prediction.notes.append(
            f"{found.unmodelled_share:.0%} of the iteration is outside the band's error model "
            "(host time, kernels priced with no held-out residuals): held fixed in it"
        )
    if found.composed_share >= 0.1:
        prediction.notes.append(
            f"{found.composed_share:.0%} of the iteration is in composed kernels (fused "
            "attention): the band varies the GEMMs they are priced from; the composition itself "
            "was never measured, so its own error is not in the band"
        )


def out_of_memory(
    traces: TraceSet, memory: dict[int, tuple[int, bool]], peak_memory: int, hw: Hardware
) -> tuple[str | None, str | None]:
    """Why the job runs out of memory (None: it does not), and a note on failed allocations it survived.

    A failed device allocation is not an out-of-memory failure by itself: PyTorch's caching allocator then
    frees its cached blocks and retries, as it does on a GPU. The script ran out only when the error reached
    it: the capture's status is `oom`, or the run failed on a rank where an allocation failed. Otherwise the
    peak must fit the GPU priced (another, smaller GPU than the one emulated may not hold it)."""
    failed = sorted(rank for rank, (_, oom) in memory.items() if oom)
    status = traces.info["status"]
    if status == "oom" or (status == "failed" and failed):
        ooms = recorded_ooms(traces)
        return (ooms[0].describe() if ooms else "the trace records an out-of-memory failure"), None
    if peak_memory > hw.memory_bytes:
        return f"peak {peak_memory / 2**30:.2f} GiB exceeds {hw.memory_bytes / 2**30:.2f} GiB", None
    if not failed:
        return None, None
    counts = {rank: int((traces.ranks[rank].memory["kind"] == "oom").sum()) for rank in failed}
    shown = ", ".join(f"rank {rank}: {n}" for rank, n in list(counts.items())[:4])
    return None, (
        f"{sum(counts.values())} device allocation(s) failed ({shown}{' ...' if len(counts) > 4 else ''}) "
        "and the script went on: PyTorch's caching allocator freed its cached blocks and retried, as on a "
        "GPU, where each retry also synchronises the device (not priced)"
    )


KNOWN_READS = r'"stand_in": "(?:computed|routed)"'
"""Host reads of values the emulator computed on the host (`host_values.cpp`): real given the inputs,
or following an assumed routing (which `routing_notes` reports)."""
SCALAR_READS = {"aten::_local_scalar_dense", "aten::item"}
"""Ops whose host reads of device values are scalars (`.item()`: loss logging), not shapes."""


def stand_in_notes(traces: TraceSet) -> list[str]:
    """A note on the emulated host reads of device values that can decide shapes or control flow (e.g.
    `nonzero` in MoE routing): the emulator answered them with stand-ins, so the program that ran may
    differ from a real run's. Scalar reads (`.item()`) alone say nothing."""
    counts: dict[str, int] = {}
    for trace in traces.ranks.values():
        calls = trace.calls
        if "data_dependent" not in calls or not calls["data_dependent"].fillna(False).any():
            continue
        names = dict(zip(trace.ops["op_id"], trace.ops["name"])) if len(trace.ops) else {}
        read = calls["data_dependent"].fillna(False).astype(bool) & (calls["api"] != TIMING_API)  # timings: own note
        if "args" in calls:  # values the emulator computed on the host from values it knew are not stand-ins
            read &= ~calls["args"].fillna("").str.contains(KNOWN_READS, regex=True)
        for op in calls.loc[read, "op_id"]:
            name = names.get(op, "(no op)") if op == op else "(no op)"
            counts[name] = counts.get(name, 0) + 1
    if not set(counts) - SCALAR_READS:
        return []
    top = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
    return [
        f"{sum(counts.values())} host reads of device values got emulated stand-ins ({top}): shapes or "
        "control flow that depend on them (MoE routing, dynamic shapes) may differ from a real run"
    ]


def evaluation_notes(sim: Simulation) -> list[str]:
    """A note on the evaluation passes (the model called in eval mode or under inference mode) that the steady
    state leaves out: how long each took in the replay, so that a script that validates every k iterations
    (nanoGPT's `estimate_loss`, a Trainer's validation loop) can add it, spread over those k."""
    passes = []
    for rep, result in zip(sim.replicas, sim.results):
        program = rep.program
        if not rep.captured:
            continue
        trace = sim.traces.ranks[program.rank]
        mask = evaluating(trace)
        if not mask.any():
            continue
        ops = trace.ops
        calls_per_iteration = (
            ops.loc[ops["name"] == "maya::eval"].drop_duplicates("op_id").groupby("iteration").size()
            if len(ops)
            else {}
        )
        bounds = sim.iterations[program.rank].bounds
        for k in range(len(bounds) - 1):
            idx = np.flatnonzero(mask[bounds[k] : bounds[k + 1]]) + bounds[k]
            if not len(idx):
                continue
            start = float((result.issue[idx] - program.host[idx]).min())
            end = float(max((result.issue[idx] + result.wait[idx]).max(), result.end[idx].max()))
            # a compiled model's first pass in eval mode compiles and autotunes: its timed candidates are in it
            timed = int((trace.calls["api"].iloc[idx.min() : idx.max() + 1] == TIMING_API).sum())
            passes.append((program.rank, k, int(calls_per_iteration.get(k, 0)), end - start, timed))
    if not passes:
        return []
    shown = "; ".join(
        f"rank {rank}, iteration {k}: {span / 1e6:,.1f} ms"
        + (f" ({calls} model call{'s' * (calls > 1)})" if calls else "")
        + (f", with autotuning ({timed} timed candidates)" if timed else "")
        for rank, k, calls, span, timed in passes[:3]
    )
    more = f" and {len(passes) - 3} more" if len(passes) > 3 else ""
    return [
        f"evaluation passes are not in the steady state ({shown}{more}): a script that evaluates every k "
        "iterations spends that much more every k"
    ]


def routing_notes(traces: TraceSet) -> list[str]:
    """A note on routing the emulator assumed: index choices on values only a GPU computes (`topk`, `argmax`,
    `sort`, ... of router logits, or of anything else) got the indices of a balanced router (run attrs
    `routing_stand_ins`, from the emulator's `host_values.cpp`)."""
    per_rank = traces.attrs.get("routing_stand_ins") or {}
    counts: dict[str, int] = {}
    for ops in per_rank.values():
        for name, n in ops.items():
            counts[name] = counts.get(name, 0) + int(n)
    if not counts:
        return []
    top = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return [
        f"routing was assumed: {sum(counts.values())} index choices on values only a GPU computes ({top}) were "
        "given a balanced router's choices (every expert or index its share): an MoE's expert GEMMs and "
        "all-to-alls follow that routing, not a trained router's; indices chosen for anything else (a sort "
        "building flex attention's block mask) are assumed the same way"
    ]


def subset_notes(traces: TraceSet) -> list[str]:
    """A note on ranks `maya emulate --ranks` did not capture and a captured rank of their pipeline stage stands
    for (run attrs `represents_assumed`, from the emulator's `subset.py`): an SPMD job is assumed, unverified."""
    assumed = traces.attrs.get("represents_assumed") or {}
    if not assumed:
        return []
    parts = "; ".join(
        f"rank {rep} for {_ranges(ranks)}" for rep, ranks in sorted(assumed.items(), key=lambda kv: int(kv[0]))
    )
    return [
        f"SPMD assumed: {sum(map(len, assumed.values()))} rank(s) were not captured (--ranks) and replay the "
        f"capture of a rank of their pipeline stage ({parts}), unverified: work only those ranks do differently "
        "(rank-specific logging, uneven shards) is not in the prediction"
    ]


def _ranges(ranks: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `1-3, 7`."""
    out: list[list[int]] = []
    for r in sorted(ranks):
        if out and out[-1][1] == r - 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)


def predict(
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
    store: bool = True,
    warehouse: str | Path | None = None,
    band: bool = False,
    contention: bool = True,
) -> tuple[Prediction, str | None]:
    """Predict a run, optionally re-targeted to another GPU (`hardware`), data-parallel degree (`dp`) or
    cluster; returns the prediction and its warehouse id (None with `store=False`). With `band`, it carries the
    10–90% band of its iteration time (`band.iteration_band`: two more replays). The timeline shows every
    rank of jobs up to `TIMELINE_RANKS` ranks, else the captured ones. `contention`: see `simulate`."""
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
    )
    prediction = summarize(
        sim, tokens_per_iteration=tokens_per_iteration, price_per_gpu_hour=price_per_gpu_hour, assumptions=assumptions
    )
    if band:
        add_band(sim, prediction)
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
    return prediction, store_prediction(prediction, warehouse) if store else None
