"""What-if re-targeting of a trace: another GPU, data-parallel degree or cluster than the one it was
captured or measured on, each change listed as an assumption of the prediction (`retarget`,
`gpu_assumption`).

- Data-parallel degree (`data_parallel`): a trace whose collectives all span the whole job is replayed by
  `n` ranks; new rank `r` replays the program of the rank that stood for rank `r mod W` (W: the trace's
  world size), the job-wide communicators hold all `n` ranks and every collective is priced for them.
  nccl-tests message sizes (all-reduce buffer, all-gather output, reduce-scatter input) do not depend on
  the degree, so the per-rank work and message sizes stay as traced (same per-GPU batch).
- Cluster (`cluster_spec`): GPUs per node and link bandwidths of a shipped or given cluster spec; the
  job's ranks are laid out on its nodes (`with_nodes`) and collectives priced on its links.
- GPU (`RepricedDurations`): a measured trace keeps its measured kernel durations scaled by the ratio of
  the estimates on the target and on the measured GPU (what the estimators get wrong on both cancels);
  re-targeted collectives are priced by the NCCL collective model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from .durations import DurationProvider, MeasuredDurations
from .durations.estimated import cluster_spec
from .opcodes import COLL, DEVICE_OPS
from .trace import RankTrace, TraceSet

DEFAULT_GPUS_PER_NODE = 8
"""Ranks per node when neither the trace nor a cluster spec says."""


def source_hardware(traces: TraceSet) -> Hardware | None:
    """The GPU the trace was captured or measured on: its catalog name, else the name its devices report."""
    from maya.core import hardware as catalog

    names = [traces.hardware, *(t.device.get("device_name") for t in traces.ranks.values())]
    for name in names:
        if isinstance(name, str) and name:
            try:
                return catalog.get(name)
            except KeyError:
                continue
    return None


def with_nodes(traces: TraceSet, gpus_per_node: int) -> TraceSet:
    """The trace with its ranks laid out `gpus_per_node` to a node."""
    return replace(traces, info={**traces.info, "nproc_per_node": gpus_per_node})


def data_parallel(traces: TraceSet, n: int) -> TraceSet:
    """The trace re-targeted to `n` data-parallel ranks (see the module doc). Raises ValueError when a
    collective does not span the whole job (tensor, pipeline or expert parallelism) or is point-to-point."""
    if n < 1:
        raise ValueError(f"data-parallel degree {n} must be at least 1")
    world = int(traces.info["world_size"])
    stands_for: dict[int, int] = {}
    for y, trace in traces.ranks.items():
        _check_job_wide(trace, world)
        for x in trace.represents:
            stands_for[x] = y
    absent = sorted(set(range(world)) - set(stands_for))
    if absent:
        raise ValueError(f"ranks {absent[:8]} of the {world}-rank trace are neither captured nor represented")
    if all(t.calls["collective_name"].isna().all() for t in traces.ranks.values()):
        raise ValueError(
            "--dp re-targets the collectives of a data-parallel trace; this one has none (capture "
            "the script with its data-parallel wrapper, e.g. DDP on 2 ranks)"
        )
    lists: dict[int, list[int]] = {}
    for r in range(n):
        lists.setdefault(stands_for[r % world], []).append(r)
    ranks = {}
    for y, members in lists.items():
        trace = traces.ranks[y]
        if members[0] != y:  # the captured rank's own number is beyond n: it stands for others only
            members = [m for m in members if m != y]
        comms = trace.communicators.copy()
        comms["ranks"] = [list(range(n))] * len(comms)
        comms["comm_size"] = n
        device = {**trace.device, "represents": members}
        ranks[members[0]] = replace(trace, rank=members[0], communicators=comms, device=device)
    return replace(traces, info={**traces.info, "world_size": n}, ranks=dict(sorted(ranks.items())))


def _check_job_wide(trace: RankTrace, world: int) -> None:
    calls = trace.calls
    used = calls["comm_id"].dropna().unique()
    p2p = calls["collective_name"].astype(str).str.lower().str.contains("send|recv", regex=True)
    if p2p.any():
        raise ValueError(
            "--dp re-targets data-parallel traces; this one has point-to-point transfers (pipeline parallelism)"
        )
    sizes = trace.communicators.drop_duplicates("comm_id").set_index("comm_id")["comm_size"]
    partial = [c for c in used if c in sizes.index and int(sizes[c]) != world]
    if partial:
        raise ValueError(
            f"--dp re-targets data-parallel traces; communicator {partial[0]!r} spans "
            f"{int(sizes[partial[0]])} of the {world} ranks (tensor, pipeline or expert parallelism)"
        )


def retarget(
    traces: TraceSet, hardware: Hardware, *, dp: int | None = None, cluster: str | None = None
) -> tuple[TraceSet, list[str]]:
    """The trace re-targeted to `dp` data-parallel ranks and/or the nodes of `cluster` (with `dp` alone, of the
    first shipped cluster of `hardware`), and the changed assumptions in words."""
    assumptions: list[str] = []
    if cluster is None and dp is None:
        return traces, assumptions
    spec = cluster_spec(cluster, hardware)
    if cluster is not None:
        assumptions.append(f"cluster: {spec.name} ({spec.summary()}): collectives priced on it")
    per_node = spec.gpus_per_node if spec is not None else traces.nproc_per_node or DEFAULT_GPUS_PER_NODE
    if per_node != traces.nproc_per_node:
        if traces.nproc_per_node:
            assumptions.append(f"ranks laid out {per_node} per node instead of {traces.nproc_per_node}")
        traces = with_nodes(traces, per_node)
    if dp is not None:
        world = int(traces.info["world_size"])
        traces = data_parallel(traces, dp)
        nodes = -(-dp // per_node)
        assumptions.append(
            f"data-parallel degree {dp} instead of {world} ({nodes} node(s) of {per_node} GPUs): "
            "same per-GPU batch and work, each rank replays the program of a traced rank; "
            f"the job-wide collectives span {dp} ranks and are re-priced"
        )
    return traces, assumptions


def gpu_assumption(traces: TraceSet, hardware: Hardware, provider: DurationProvider) -> list[str]:
    """The GPU change in words, when the prediction is for another GPU than the trace's."""
    source = source_hardware(traces)
    if source is None or source.name == hardware.name:
        return []
    measured = all((t.calls["time_source"] == "measured").all() for t in traces.ranks.values())
    how = provider.gpu_change(source, hardware)
    return [
        f"GPU: {hardware.name} instead of {source.name}, where the trace was "
        f"{'measured' if measured else 'captured'}: {how}"
    ]


@dataclass
class RepricedDurations(DurationProvider):
    """Measured durations re-targeted: kernels scaled by `kernels(target) / kernels(source)` when the target GPU
    differs from the measured one, collectives priced by `collectives` when given (another data-parallel
    degree or cluster), host time and launch delays as measured."""

    source: Hardware
    kernels: DurationProvider | None = None
    collectives: DurationProvider | None = None
    measured: MeasuredDurations = field(default_factory=MeasuredDurations)
    replays_measured_kernels = True
    measures_host_time = True

    @property
    def name(self) -> str:
        priced = [f"kernels scaled by {self.kernels.name}"] if self.kernels is not None else []
        priced += [f"collectives by {self.collectives.name}"] if self.collectives is not None else []
        return f"measured ({'; '.join(priced)})"

    @property
    def collective_includes_wait(self) -> bool:
        return self.collectives is None

    @property
    def notes(self) -> list[str]:
        return [n for p in (self.kernels, self.collectives) if p is not None for n in p.notes]

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        out = self.measured.device_ns(calls, hardware)
        ops = calls["opcode"].to_numpy()
        kernels = np.isin(ops, DEVICE_OPS) & (ops != COLL)
        if self.kernels is not None and hardware.name != self.source.name and kernels.any():
            rows = calls.loc[kernels]
            new, old = self.kernels.device_ns(rows, hardware), self.kernels.device_ns(rows, self.source)
            ok = (old > 0) & np.isfinite(new) & np.isfinite(old)
            out[kernels] *= np.where(ok, new / np.where(ok, old, 1.0), 1.0)
        coll = ops == COLL
        if self.collectives is not None and coll.any():
            out[coll] = self.collectives.device_ns(calls.loc[coll], hardware)
        return out

    def host_ns(self, calls: pd.DataFrame) -> np.ndarray:
        return self.measured.host_ns(calls)

    def launch_ns(self, calls: pd.DataFrame) -> np.ndarray:
        return self.measured.launch_ns(calls)

    def gpu_change(self, source: Hardware, target: Hardware) -> str:
        if self.kernels is None:
            return "kernel durations kept as measured"
        return (
            f"kernel durations as measured x ({self.kernels.name} on {target.name}) / "
            f"(the same on {source.name}); host time per call as measured"
        )
