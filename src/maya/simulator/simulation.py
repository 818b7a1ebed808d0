"""`simulate` a trace: compile every rank, expand deduplicated ranks, price the calls with a `DurationProvider`
(named by a `--durations` choice or given), and replay them on the event-driven engine, twice when collectives
slow the kernels beside them (contention)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maya.core import settings
from maya.core.hardware import Hardware

from . import sustained_clock as sustained
from .contention import contend
from .durations import DurationProvider, MeasuredDurations, RooflineDurations, is_measured
from .durations.estimated import CollectiveDurations, EstimatorDurations, EstimatorsUnavailable, cluster_spec
from .durations.framework import emulated
from .engine import Engine, RankResult
from .iterations import Iterations, detect
from .opcodes import classify
from .pricing import price
from .program import Program, compile_rank
from .retarget import RepricedDurations, source_hardware
from .topology import GlobalComm, Replica, expand
from .trace import TraceSet, capture_statuses, interrupted_by

DURATION_CHOICES = ("auto", "estimators", "roofline", "measured")


@dataclass
class Simulation:
    """One replay of a trace on one GPU: what was priced and replayed, and every rank's result."""

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
    host_factor: float = 0.0
    """Target host time per second of framework time on the emulating CPU (`host_factor`; 0: not added)."""

    @property
    def calls(self) -> int:
        """Calls replayed, over all simulated ranks."""
        return sum(r.program.n for r in self.replicas)

    def result(self, rank: int) -> RankResult:
        return next(res for res in self.results if res.rank == rank)


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


def host_factor(cluster: str | None, hardware: Hardware) -> tuple[float, str]:
    """The target host's framework time per second of it on the emulating CPU, and where it comes from:
    `$MAYA_HOST_FACTOR`, else the cluster's `host_factor`, else 0 (not stated: framework time is reported, not
    added; `docs/host-time.md` says why)."""
    chosen = settings.host_factor()
    if chosen is not None:
        return chosen, settings.HOST_FACTOR.name
    spec = cluster_spec(cluster, hardware)
    if spec is not None and spec.host_factor is not None:
        return spec.host_factor, f"cluster {spec.name}"
    return 0.0, "not stated"


def _emulated(traces: TraceSet) -> bool:
    """Whether any rank holds calls the emulator timed (the only ones with framework time to add)."""
    source = traces.info.get("source")
    return any(emulated(t.calls, source).any() for t in traces.ranks.values())


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
    sustained_clock: bool = True,
) -> Simulation:
    """Replay every rank of `traces` on `hardware` with `provider` (or a `--durations` choice; measured
    collectives are re-priced with `reprice_collectives`, for a re-targeted degree or cluster). With
    `contention`, kernels running beside a collective are slowed by the SMs and bandwidth NCCL takes and, on a
    power-capped Hopper part, the clock its traffic takes (`contention`: a second replay), unless the kernel
    durations were measured, as they are or scaled to another GPU (they hold it already). With
    `sustained_clock`, a provider that prices burst (short-loop) kernel timings has its compute-bound tensor-core kernels slowed to the clock their mix sustains under the board's
    power cap, on parts where it binds (`sustained_clock`)."""
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
    factor = host_factor(cluster, hardware)[0] if not provider.measures_host_time and _emulated(traces) else 0.0
    iterations = {rank: detect(traces.ranks[rank], p.opcodes) for rank, p in programs.items()}
    devices = price(traces, replicas, comms, provider, hardware, factor, iterations)
    notes += provider.notes
    clocks: dict[int, sustained.SustainedClock] = {}
    if sustained_clock and provider.prices_burst_kernels:
        devices, clock_notes, clocks = sustained.apply(programs, replicas, devices, iterations, hardware)
        notes += clock_notes
    by = interrupted_by(traces)
    whole = [rank for rank, found in iterations.items() if found.source == "whole"]
    if by and whole:
        raise ValueError(
            f"{traces.path}: the capture was interrupted by {by} and rank {whole[0]}'s calls show no complete "
            "iteration (no optimizer step, no repeated sequence): there is nothing to predict from; capture it "
            "again and let it run longer"
        )
    statuses = capture_statuses(traces)
    engine = Engine(replicas, devices, comms, shortest_collective=provider.collective_includes_wait, statuses=statuses)
    t0 = time.perf_counter()
    results = engine.run()
    seconds, replays = time.perf_counter() - t0, 1
    del engine  # it holds every call of the job as Python objects: let them go before the next
    if contention and not provider.replays_measured_kernels:
        spec = cluster_spec(cluster, hardware)
        contended, power_notes = contend(traces, replicas, comms, devices, results, hardware, spec, clocks)
        if contended is not devices:
            devices = contended
            notes += power_notes
            engine = Engine(
                replicas, devices, comms, shortest_collective=provider.collective_includes_wait, statuses=statuses
            )
            t0 = time.perf_counter()
            results = engine.run()
            seconds, replays = seconds + time.perf_counter() - t0, 2
            del engine
    return Simulation(
        traces,
        hardware,
        provider,
        programs,
        iterations,
        replicas,
        comms,
        devices,
        results,
        seconds,
        notes,
        replays,
        factor,
    )
