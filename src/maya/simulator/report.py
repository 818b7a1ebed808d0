"""From simulated times to the prediction: iteration time, its breakdown, MFU and HFU, memory and cost.

Iteration k of a rank ends when both its host calls and every device call it issued are done
(`E_k`, never earlier than `E_{k-1}`); its time is `E_k - E_{k-1}`. Within that window:

- compute: some stream runs a kernel, copy or memset;
- exposed communication: a collective or send/receive moves data (all its peers have arrived) and no compute does;
- peer wait: a collective or send/receive waits for a peer that has not arrived yet, and nothing above runs (a
  pipeline stage's bubble, a straggler, load imbalance);
- host-bound: the device is idle while the host issues calls;
- idle: the rest (device idle, host blocked).

The five add up to the iteration time. A rank's steady-state figures are those of its median steady
iteration (the mean of the two middle ones for an even count); the job's are those of its slowest rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from .attention_shapes import ATTENTION_BACKWARD_FLOPS
from .distinct import contains, per_distinct
from .durations import device_end, rebased
from .engine import RankResult
from .intervals import union
from .iterations import Iterations
from .opcodes import WORK, WORK_SYNC
from .program import Program
from .topology import Replica
from .trace import RankTrace, TraceSet

BREAKDOWN = ("compute_ns", "exposed_comm_ns", "peer_wait_ns", "host_bound_ns", "idle_ns")


@dataclass
class RankReport:
    rank: int
    iteration_ns: float
    compute_ns: float
    exposed_comm_ns: float
    peer_wait_ns: float
    host_bound_ns: float
    idle_ns: float
    model_flops: float
    """GEMM and attention FLOPs of one steady iteration, less those of recomputed forward passes and with a fused
    attention backward counted as twice its forward (model FLOPs, as Megatron-LM and the MFU literature count them:
    `model_flops`)."""
    mfu: float
    """Model FLOPs utilization: `model_flops` over the iteration time at the GPU's peak."""
    hardware_flops: float
    """GEMM and attention FLOPs the GPU ran in one steady iteration, recomputation included."""
    hfu: float
    """Hardware FLOPs utilization: `hardware_flops` over the iteration time at the GPU's peak."""
    peak_memory_bytes: int
    iteration_ends_ns: list[int] = field(repr=False)
    """End of every iteration (steady or not), ns from the start of the replay."""


@dataclass
class Prediction:
    run_id: str
    run_path: str
    hardware: str
    durations: str
    world_size: int
    simulated_ranks: int
    captured_ranks: int
    iterations: int
    steady_iterations: int
    iteration_source: str
    iteration_ns: float
    compute_ns: float
    exposed_comm_ns: float
    peer_wait_ns: float
    host_bound_ns: float
    idle_ns: float
    critical_rank: int
    mfu: float
    """Model FLOPs utilization (no recomputation counted)."""
    hfu: float
    """Hardware FLOPs utilization (recomputed forward passes counted)."""
    mfu_dtype: str
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float
    peak_memory_bytes: int
    memory_capacity_bytes: int
    headroom_bytes: int
    oom: bool
    oom_reason: str | None
    tokens_per_iteration: float | None
    tokens_per_s: float | None
    price_per_gpu_hour: float | None
    cost_per_iteration: float | None
    cost_per_million_tokens: float | None
    simulated_calls: int
    simulation_s: float
    ranks: list[RankReport]
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    """What the prediction changes from the trace (GPU, data-parallel degree, cluster) and how."""
    measured_iteration_ns: float | None = None
    """The trace's own measured steady iteration time (measured traces; slowest captured rank)."""
    replay_error: float | None = None
    """(predicted - measured) / measured iteration time when the trace's measured durations are replayed
    unchanged: the simulator's own fidelity."""
    band: dict | None = None
    """10–90% band of the iteration time from the estimators' held-out residuals (`band.IterationBand`)."""
    peak_allocated_bytes: int | None = None
    """Peak bytes torch's caching allocator handed out to tensors (`torch.cuda.max_memory_allocated()`) over the
    whole run, where the capture recorded it (emulated runs): kept across the script's own peak resets (torchtune,
    torchtitan, DeepSpeed and HF Trainer reset them), so it can exceed what such a script prints. `peak_memory_bytes`
    is the device memory held, the allocator's cached blocks included, which can be more (a large block that fits
    none of the freed ones)."""
    allocated_peaks_by_rank: dict[int, int] | None = None
    """`peak_allocated_bytes` per captured rank (`max_memory_allocated()` over the rank's run, whatever the script
    reset), where recorded."""

    def to_dict(self, *, per_rank: bool = True) -> dict:
        """JSON-ready: times also in milliseconds (`iteration_ms`, ...)."""
        out = {k: v for k, v in asdict(self).items() if k != "ranks"}
        out["iteration_ms"] = self.iteration_ns / 1e6
        out["breakdown_ms"] = {name[:-3]: getattr(self, name) / 1e6 for name in BREAKDOWN}
        if per_rank:
            out["ranks"] = [
                {k: v for k, v in asdict(r).items() if k != "iteration_ends_ns"}
                | {"iteration_ms": r.iteration_ns / 1e6}
                for r in self.ranks
            ]
        return out

    def to_frame(self, *, per_rank: bool = False) -> pd.DataFrame:
        """The job's figures as a one-row DataFrame indexed by `run_id` (times also in ms, the band as
        `band_low_ms` / `band_high_ms`, notes and assumptions as lists); with `per_rank`, one row per simulated
        rank indexed by `rank`."""
        if per_rank:
            rows = [{k: v for k, v in asdict(r).items() if k != "iteration_ends_ns"} for r in self.ranks]
            frame = pd.DataFrame(rows, columns=[f for f in RankReport.__dataclass_fields__ if f != "iteration_ends_ns"])
            frame["iteration_ms"] = frame["iteration_ns"] / 1e6
            return frame.set_index("rank")
        row = self.to_dict(per_rank=False)
        breakdown, band = row.pop("breakdown_ms"), row.pop("band") or {}
        row |= {f"{name}_ms": ms for name, ms in breakdown.items()}
        row |= {"band_low_ms": band["low_ns"] / 1e6 if band else None}
        row |= {"band_high_ms": band["high_ns"] / 1e6 if band else None}
        return pd.DataFrame([row]).set_index("run_id")


def _median_pick(durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions and weights of the median element(s) of `durations`."""
    order = np.argsort(durations, kind="stable")
    m = len(order)
    if m % 2:
        return order[[m // 2]], np.array([1.0])
    return order[[m // 2 - 1, m // 2]], np.array([0.5, 0.5])


def rank_reports(
    replicas: list[Replica],
    results: list[RankResult],
    devices: list[np.ndarray],
    iterations: dict[int, Iterations],
    peak_flops: float,
    peak_memory: dict[int, int] | None = None,
) -> list[RankReport]:
    """`rank_report` of every replica (`peak_memory` per program rank; None: 0), computed once per distinct
    (result, program, device times): the ranks a folded replay gave the same times share it."""
    done: dict[tuple[int, int, int], RankReport] = {}
    out = []
    for replica, result, device in zip(replicas, results, devices):
        program = replica.program
        key = (id(result.end), id(program), id(device))
        if key not in done:
            memory = peak_memory[program.rank] if peak_memory is not None else 0
            done[key] = rank_report(result, program, device, iterations[program.rank], peak_flops, memory)
        report = done[key]
        out.append(report if report.rank == result.rank else replace(report, rank=result.rank))
    return out


MODEL_ATTENTION_BACKWARD = 2.0
"""Model FLOPs of an attention backward, in forwards: its four products (Megatron-LM's formula counts every
backward as twice its forward); a fused kernel's recomputed QK^T (`ATTENTION_BACKWARD_FLOPS`) is hardware FLOPs."""


def model_flops_of(frame: pd.DataFrame, flops: np.ndarray) -> np.ndarray:
    """Per call, the model FLOPs of its `flops`: none for a recomputed forward pass, a fused attention backward's
    without its recomputed QK^T."""
    recomputed = frame["recomputed"].to_numpy(dtype=bool) if "recomputed" in frame else np.zeros(len(flops), bool)
    backward = np.zeros(len(flops), bool)
    if {"family", "op"} <= set(frame.columns):
        backward = per_distinct(frame["family"], lambda family: family == "attention", False, bool)
        backward &= contains(frame["op"], "_bwd")
    share = np.where(backward, MODEL_ATTENTION_BACKWARD / ATTENTION_BACKWARD_FLOPS, 1.0)
    return np.where(recomputed, 0.0, flops * share)


def rank_report(
    result: RankResult,
    program: Program,
    device: np.ndarray,
    iterations: Iterations,
    peak_flops: float,
    peak_memory: int,
) -> RankReport:
    bounds = iterations.bounds
    starts = bounds[:-1]
    last = bounds[1:] - 1
    host_done = result.issue[last] + result.wait[last]
    device_done = np.maximum.reduceat(result.end, starts)
    ends = np.maximum.accumulate(np.maximum(host_done, device_done))
    begins = np.concatenate([[0], ends[:-1]])
    durations = ends - begins

    kernels = np.isin(program.opcodes, (WORK, WORK_SYNC)) & (device > 0)
    compute = (result.end[kernels] - device[kernels], result.end[kernels])
    transfer = (result.launch_ready, result.launch_end)
    waiting = (result.launch_start, result.launch_ready)
    busy = program.host > 0
    host = (result.issue[busy] - program.host[busy], result.issue[busy])
    layers = [union(compute), union(compute, transfer), union(compute, transfer, waiting)]
    layers.append(union(compute, transfer, waiting, host))

    steady = iterations.steady
    pick, weights = _median_pick(durations[steady])
    k = steady[pick]
    a, b = begins[k], ends[k]
    covered = np.array([np.zeros_like(a), *(layer.covered(a, b) for layer in layers), b - a], float)
    parts = np.diff(covered, axis=0)
    every = np.nan_to_num(program.frame["flops"].to_numpy(dtype="float64"))
    iteration = float(weights @ durations[k])
    model_flops = float(weights @ np.add.reduceat(model_flops_of(program.frame, every), starts)[k])
    hardware_flops = float(weights @ np.add.reduceat(every, starts)[k])
    return RankReport(
        rank=result.rank,
        iteration_ns=iteration,
        **dict(zip(BREAKDOWN, (parts @ weights).tolist())),
        model_flops=model_flops,
        mfu=model_flops / (iteration * 1e-9 * peak_flops) if iteration else 0.0,
        hardware_flops=hardware_flops,
        hfu=hardware_flops / (iteration * 1e-9 * peak_flops) if iteration else 0.0,
        peak_memory_bytes=int(peak_memory),
        iteration_ends_ns=ends.tolist(),
    )


def measured_iteration(trace: RankTrace, iterations: Iterations) -> float | None:
    """The rank's measured steady iteration time, by the replay's definition (an iteration ends when its
    last host call has returned and its device work has finished); None unless every call is measured and
    its device work has a measured start."""
    calls = trace.calls
    timed = calls["device_start_ns"].notna() | calls["device_duration_ns"].isna()
    if not len(calls) or not (calls["time_source"] == "measured").all() or not timed.all():
        return None
    start = rebased(calls["start_ns"], calls["start_ns"])
    host_end = start + calls["duration_ns"].to_numpy(dtype="float64", na_value=0.0)
    ends = np.maximum.accumulate(np.maximum.reduceat(np.fmax(host_end, device_end(calls)), iterations.bounds[:-1]))
    durations = ends - np.concatenate([[start.min()], ends[:-1]])
    pick, weights = _median_pick(durations[iterations.steady])
    return float(weights @ durations[iterations.steady][pick])


def mfu_dtype(frames: Iterable[pd.DataFrame]) -> str:
    """The element type carrying most GEMM and attention FLOPs (its peak is the MFU denominator); `frames` are
    read one at a time (a rebuilt stage's is built on each read: `program.RebuiltProgram`)."""
    flops = pd.concat([f.loc[f["flops"].notna(), ["dtype", "flops"]] for f in frames])
    if flops.empty:
        return "bf16"
    return str(flops.groupby("dtype")["flops"].sum().idxmax())


def memory_peak(trace: RankTrace) -> tuple[int, bool]:
    """Peak device bytes allocated and whether an allocation failed (out of memory)."""
    mem = trace.memory
    if not len(mem):
        return 0, False
    device = mem[mem["space"].isna() | (mem["space"] == "device")].sort_values("seq")
    oom = bool((mem["kind"] == "oom").any())
    if device["allocated_bytes"].notna().any():
        return int(device["allocated_bytes"].max()), oom
    signed = np.where(
        device["kind"] == "alloc", device["bytes"], np.where(device["kind"] == "free", -device["bytes"], 0)
    )
    return int(np.maximum(np.cumsum(signed), 0).max(initial=0)), oom


def allocator_peaks(traces: TraceSet) -> dict[int, int]:
    """Per captured rank, the most bytes torch's caching allocator handed out to tensors on its GPU(s) over the run
    (`torch.cuda.max_memory_allocated()` as it would read with no reset: the emulator's attrs `allocator_peaks`,
    kept across the script's own resets, so more than a resetting script prints); empty when the
    capture did not record them (measured traces, emulations before they were recorded, a rank whose allocator has
    no statistics)."""
    peaks = {}
    for rank, devices in (traces.attrs.get("allocator_peaks") or {}).items():
        known = [int(d["allocated_bytes"]) for d in (devices or {}).values() if d.get("allocated_bytes") is not None]
        if known:
            peaks[int(rank)] = max(known)
    return dict(sorted(peaks.items()))


def allocator_peak(traces: TraceSet) -> int | None:
    """The most bytes torch's caching allocator handed out to tensors on any captured rank's GPU (`allocator_peaks`);
    None when the capture did not record it."""
    return max(allocator_peaks(traces).values(), default=None)


def job_figures(
    reports: list[RankReport],
    world_size: int,
    peak_flops: float,
    *,
    tokens_per_iteration: float | None,
    price_per_gpu_hour: float | None,
) -> dict:
    """Job-level figures: the slowest rank's time and breakdown, job MFU and HFU, throughput and cost."""
    critical = max(reports, key=lambda r: (r.iteration_ns, -r.rank))
    seconds = critical.iteration_ns * 1e-9
    gpus = max(world_size, len(reports))
    flops = sum(r.model_flops for r in reports)
    hardware_flops = sum(r.hardware_flops for r in reports)
    tokens_per_s = tokens_per_iteration / seconds if tokens_per_iteration and seconds else None
    cost = seconds * gpus * price_per_gpu_hour / 3600 if price_per_gpu_hour is not None else None
    return {
        "iteration_ns": critical.iteration_ns,
        "critical_rank": critical.rank,
        **{name: getattr(critical, name) for name in BREAKDOWN},
        "mfu": flops / (seconds * len(reports) * peak_flops) if seconds else 0.0,
        "hfu": hardware_flops / (seconds * len(reports) * peak_flops) if seconds else 0.0,
        "model_flops_per_iteration": flops,
        "hardware_flops_per_iteration": hardware_flops,
        "tokens_per_s": tokens_per_s,
        "cost_per_iteration": cost,
        "cost_per_million_tokens": cost / tokens_per_iteration * 1e6
        if cost is not None and tokens_per_iteration
        else None,
    }
