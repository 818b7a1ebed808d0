"""How long each call takes: the `DurationProvider` interface and two stand-alone providers.

A provider prices the *priced frame* of one rank: its api_calls columns plus `opcode`
(`maya.simulator.opcodes`), the work columns of `maya.simulator.work` (`family`, `op`, `dtype`, `batch`,
`m`, `n`, `k`, `numel`, `flops`, `work_bytes`, `collective`, `comm_bytes`) and the communicator's
`comm_size` and `comm_nodes` for collectives. `device_ns` returns the device time of every row (rows
without device work are ignored) and `host_ns` the host (CPU) time the issuing thread spends on it.
`DurationProvider` is the base class of every provider: it names everything the simulator asks of one,
with defaults, so a new provider subclasses it and overrides `device_ns` (and what else it knows).

- `MeasuredDurations`: the trace's own measured device durations (trace-driven replay of profiles);
- `RooflineDurations`: an analytical fallback (GEMM FLOPs over peak, bytes over bandwidth, alpha-beta
  collectives) so the simulator runs with nothing trained;
- `maya.simulator.durations.estimated.EstimatorDurations`: the trained estimators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from ..opcodes import COLL, DEVICE_OPS, GROUP_END, GROUP_START, HOST_SYNC_OPS, NOP, RECORD, STREAM_SYNC, WAIT, WORK_SYNC

if TYPE_CHECKING:
    from maya.estimators import KernelEstimator

LIBRARY_DOMAINS = ("cublas", "cublaslt", "cudnn")


class DurationProvider:
    """How long each call of a priced frame takes; the base class of every provider.

    Subclasses override `device_ns` and whatever else they know; the defaults describe a provider that
    prices from work alone: no measured kernels, no launch delays, no notes, no held-out residuals."""

    name: str = "custom"
    """What priced the durations, in words (the prediction's `durations`)."""
    collective_includes_wait: bool = False
    """True when collective durations include waiting for peers (measured kernels): the simulator
    then takes the shortest member's duration as the transfer time."""
    replays_measured_kernels: bool = False
    """True when kernel durations are the trace's own measurements, as they are or scaled to another GPU: they
    already hold the slowdown a concurrent collective caused (no contention replay)."""
    prices_burst_kernels: bool = False
    """True when kernel durations come from short-loop (burst) timings, which a training step's sustained clock
    under the board's power cap can undercut (`maya.simulator.sustained_clock`)."""
    measures_host_time: bool = False
    """True when host times are the trace's own measurements, whose gaps hold the framework's time: the simulator
    then adds none (`durations.framework`)."""

    @property
    def notes(self) -> list[str]:
        """What the user should know about how this run was priced (fallbacks taken, unresolved kernels)."""
        return []

    @property
    def kernel_estimator(self) -> KernelEstimator | None:
        """The kernel estimator pricing the kernels, whose held-out residuals give the 10-90% band (`band.py`);
        None when the kernels are not priced by one."""
        return None

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        """Device time of every row of the priced frame on `hardware` (rows without device work are ignored)."""
        raise NotImplementedError(f"{type(self).__name__} does not define device_ns")

    def host_ns(self, calls: pd.DataFrame) -> np.ndarray:
        """Host time the issuing thread spends on every row: `HOST_NS` by call class unless overridden."""
        return default_host_ns(calls)

    def launch_ns(self, calls: pd.DataFrame) -> np.ndarray | None:
        """Delay from each call's return to its device work starting; None: none (ready when the call returns)."""
        return None

    def gpu_change(self, source: Hardware, target: Hardware) -> str:
        """How kernels are priced for `target`, another GPU than the trace's `source`, in words."""
        return f"kernels priced by {self.name} for {target.name}"


class MissingDurations(ValueError):
    """A device call has no measured duration."""


@dataclass
class MeasuredDurations(DurationProvider):
    """Durations measured in the trace. Host time per call is the call's own duration plus the host gap
    before it (framework time). A synchronising call's wait is replayed, so it keeps only the part of its
    measured duration after the work it waited for had finished (all earlier device work for a device or
    event synchronisation, the stream's for a stream synchronisation or blocking copy)."""

    name: str = "measured"
    collective_includes_wait: bool = True
    replays_measured_kernels = True
    measures_host_time = True

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        measured = calls["device_duration_ns"].to_numpy(dtype="float64", na_value=np.nan)
        device = np.isin(calls["opcode"].to_numpy(), DEVICE_OPS)
        missing = device & np.isnan(measured)
        if missing.any():
            apis = ", ".join(sorted(set(calls.loc[missing, "api"].astype(str)))[:5])
            raise MissingDurations(
                f"{int(missing.sum())} device call(s) have no measured duration ({apis}); "
                "emulated traces need --durations estimators or roofline"
            )
        return np.nan_to_num(measured)

    def host_ns(self, calls: pd.DataFrame) -> np.ndarray:
        """Gaps are taken between host calls only: device rows (work without a call of its own) carry device
        times."""
        host_rows = (calls["domain"] != "device").to_numpy()
        out = np.zeros(len(calls))
        start = rebased(calls["start_ns"], calls["start_ns"])
        own = calls["duration_ns"].to_numpy(dtype="float64", na_value=0.0)
        own = np.where(np.isin(calls["opcode"].to_numpy(), HOST_SYNC_OPS), _after_awaited(calls, start, own), own)
        start, own = start[host_rows], own[host_rows]
        end = np.maximum.accumulate(start + own) if len(start) else start
        out[host_rows] = np.maximum(start - np.concatenate([start[:1], end[:-1]]), 0.0) + own
        return out

    def launch_ns(self, calls: pd.DataFrame) -> np.ndarray:
        """Launch delay per call: how long after the call returned its device work started, where the
        stream's earlier work had finished by then (nothing but the launch held it); work that queued behind
        earlier work gets the median of those. Device rows (work without a call of its own) have none."""
        start = rebased(calls["start_ns"], calls["start_ns"])
        returned = start + calls["duration_ns"].to_numpy(dtype="float64", na_value=0.0)
        began = rebased(calls["device_start_ns"], calls["start_ns"])
        ended = device_end(calls)
        launched = (
            np.isin(calls["opcode"].to_numpy(), DEVICE_OPS)
            & ~np.isnan(began)
            & (calls["domain"] != "device").to_numpy()
        )
        streams = calls["stream_id"].fillna(-1).to_numpy()
        busy_until = (
            pd.Series(np.nan_to_num(ended, nan=-np.inf))
            .groupby(streams)
            .cummax()
            .groupby(streams)
            .shift(1)
            .fillna(-np.inf)
            .to_numpy()
        )
        idle = launched & (busy_until <= returned)
        delay = began - returned
        typical = float(np.median(delay[idle])) if idle.any() else 0.0
        return np.where(launched, np.where(idle, delay, typical), 0.0)


def rebased(times: pd.Series, reference: pd.Series) -> np.ndarray:
    """Nanosecond timestamps relative to the earliest of `reference`, as float64 (epoch nanoseconds do
    not fit a float64 exactly); NaN where missing."""
    base = reference.min() if len(reference) else 0
    base = 0 if pd.isna(base) else int(base)
    return (times.astype("Int64") - base).to_numpy(dtype="float64", na_value=np.nan)


def device_end(calls: pd.DataFrame) -> np.ndarray:
    """When each call's measured device work ended, rebased as `rebased` does; NaN where unmeasured."""
    return rebased(calls["device_start_ns"], calls["start_ns"]) + calls["device_duration_ns"].to_numpy(
        dtype="float64", na_value=np.nan
    )


def _after_awaited(calls: pd.DataFrame, start: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per call: the measured time from when the device work it could wait for had finished (or from its
    start, if later) to its return."""
    filled = np.nan_to_num(device_end(calls), nan=-np.inf)
    any_stream = np.maximum.accumulate(filled) if len(filled) else filled
    same_stream = pd.Series(filled).groupby(calls["stream_id"].fillna(-1).to_numpy()).cummax().to_numpy()
    ops = calls["opcode"].to_numpy()
    awaited = np.where(np.isin(ops, (STREAM_SYNC, WORK_SYNC)), same_stream, any_stream)
    return np.clip(start + own - np.maximum(start, awaited), 0.0, own)


ROOFLINE_KERNEL_COLUMNS = ("dtype", "flops", "work_bytes", "numel", "op")
ROOFLINE_COLLECTIVE_COLUMNS = ("comm_size", "comm_nodes", "comm_bytes", "collective")
"""The call-frame columns `RooflineDurations` prices kernels and collectives from: only these rows' columns are taken
(a call frame holds ~60 columns over ~1M calls)."""


@dataclass
class RooflineDurations(DurationProvider):
    """Analytical durations: a kernel takes `max(FLOPs / (peak x compute_efficiency), bytes / (bandwidth x
    memory_efficiency))` plus `kernel_overhead_ns`; a kernel whose work is unknown takes
    `unknown_kernel_ns`. Collectives: alpha-beta, `latency + S x factor / bus bandwidth` with nccl-tests'
    bus-bandwidth factors, NVLink (else PCIe) inside a node and `network_gbs` per GPU across nodes; a send or
    recv to the rank itself (an all-to-all's own share, which NCCL copies on the GPU) as that copy: its bytes
    read and written at the memory bandwidth (`self_copy_ns`)."""

    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.8
    kernel_overhead_ns: float = 2_000.0
    unknown_kernel_ns: float = 5_000.0
    link_efficiency: float = 0.4
    """Share of the catalog's (bidirectional) NVLink or PCIe bandwidth a ring's bus bandwidth reaches."""
    network_gbs: float = 40.0
    """Bus bandwidth per GPU across nodes (one 400 Gb/s NIC per GPU, as nccl-tests reach it)."""
    base_latency_ns: float = 8_000.0
    hop_latency_ns: float = 700.0
    network_hop_latency_ns: float = 5_000.0
    name: str = "roofline"
    collective_includes_wait: bool = False

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        ops = calls["opcode"].to_numpy()
        out = np.zeros(len(calls))
        kernels = np.isin(ops, DEVICE_OPS) & (ops != COLL)
        out[kernels] = self._kernels(calls.loc[kernels, list(ROOFLINE_KERNEL_COLUMNS)], hardware)
        coll = ops == COLL
        out[coll] = self._collectives(calls.loc[coll, list(ROOFLINE_COLLECTIVE_COLUMNS)], hardware)
        return out

    def _kernels(self, calls: pd.DataFrame, hw: Hardware) -> np.ndarray:
        codes, dtypes = pd.factorize(calls["dtype"].fillna("fp32").astype(str))
        peak = np.array([hw.peak_flops(d) for d in dtypes], dtype="float64")[codes]
        itemsize = np.array(
            [{"fp64": 8, "fp32": 4, "tf32": 4, "int64": 8, "int32": 4}.get(d, 2) for d in dtypes], dtype="float64"
        )[codes]
        flops = calls["flops"].to_numpy(dtype="float64")
        traffic = calls["work_bytes"].to_numpy(dtype="float64")
        numel = calls["numel"].to_numpy(dtype="float64")
        traffic = np.where(np.isnan(traffic), 2 * itemsize * numel, traffic)  # elementwise: read and write
        op = calls["op"].astype(str)
        pcie = op.isin(["HtoD", "DtoH"]).to_numpy()
        bandwidth = np.where(pcie, hw.pcie_gbs * 1e9, hw.memory_bandwidth)
        passes = np.where(op.isin(["DtoD", "PtoP"]).to_numpy(), 2.0, 1.0)
        seconds = np.fmax(
            np.nan_to_num(flops, nan=0.0) / (peak * self.compute_efficiency),
            np.nan_to_num(traffic * passes, nan=0.0) / (bandwidth * self.memory_efficiency),
        )
        known = ~(np.isnan(flops) & np.isnan(traffic))
        return np.where(known, seconds * 1e9 + self.kernel_overhead_ns, self.unknown_kernel_ns)

    def _collectives(self, calls: pd.DataFrame, hw: Hardware) -> np.ndarray:
        ranks = calls["comm_size"].to_numpy(dtype="float64")
        nodes = np.maximum(calls["comm_nodes"].to_numpy(dtype="float64"), 1.0)
        size = calls["comm_bytes"].to_numpy(dtype="float64")
        name = calls["collective"].astype(str)
        factor = np.select(
            [name == "allreduce", name.isin(["allgather", "reducescatter", "alltoall"])],
            [2 * (ranks - 1) / ranks, (ranks - 1) / ranks],
            1.0,
        )
        intra = (hw.nvlink_gbs or hw.pcie_gbs) * self.link_efficiency * 1e9
        bus = np.where(nodes > 1, min(intra, self.network_gbs * 1e9), intra)
        steps = np.where(name == "allreduce", 2 * (ranks - 1), ranks - 1)
        latency = (
            self.base_latency_ns
            + (steps - (nodes - 1)) * self.hop_latency_ns
            + (nodes - 1) * self.network_hop_latency_ns
        )
        seconds = size * factor / bus
        own = name.isin(["send", "recv"]).to_numpy() & (ranks == 1)
        local = np.where(own, self.self_copy_ns(size, hw), 0.0)
        return np.where(ranks > 1, latency + seconds * 1e9, local)

    def self_copy_ns(self, size: np.ndarray, hw: Hardware) -> np.ndarray:
        """A send to the rank itself: NCCL copies its `size` bytes on the GPU (read and written once)."""
        return 2 * size / (hw.memory_bandwidth * self.memory_efficiency) * 1e9


HOST_NS = {
    "launch": 5_000.0,
    "library": 8_000.0,
    "collective": 6_000.0,
    "event": 1_500.0,
    "sync": 2_000.0,
    "other": 500.0,
}
"""Host time per call class (CUDA and library entry points, not framework dispatch), nanoseconds."""


def default_host_ns(calls: pd.DataFrame) -> np.ndarray:
    """Host time per call from `HOST_NS` by opcode and domain; device rows (no host call) cost nothing."""
    ops = calls["opcode"].to_numpy()
    library = calls["domain"].isin(LIBRARY_DOMAINS).to_numpy()
    cls = np.select(
        [
            (calls["domain"] == "device").to_numpy(),
            np.isin(ops, (COLL, GROUP_START, GROUP_END)),
            np.isin(ops, DEVICE_OPS) & library,
            np.isin(ops, DEVICE_OPS),
            np.isin(ops, (RECORD, WAIT)),
            np.isin(ops, HOST_SYNC_OPS),
            ops == NOP,
        ],
        [
            0.0,
            HOST_NS["collective"],
            HOST_NS["library"],
            HOST_NS["launch"],
            HOST_NS["event"],
            HOST_NS["sync"],
            HOST_NS["other"],
        ],
        HOST_NS["other"],
    )
    return cls.astype("float64")


def is_measured(calls: pd.DataFrame) -> bool:
    """Whether every device call of the frame has a measured duration."""
    device = np.isin(calls["opcode"].to_numpy(), DEVICE_OPS)
    return bool(device.any()) and bool(calls.loc[device, "device_duration_ns"].notna().all())
