"""What a running NCCL collective takes from the kernels beside it on its GPU.

NCCL runs each collective as one kernel with a thread block per channel, each resident on its own SM for the
collective's duration, and its copies read and write HBM. A kernel overlapping it therefore runs on fewer SMs
and, if it is memory-bound, with less bandwidth:

    slowdown = max(compute_s / (1 - sm_share), memory_s / (1 - hbm_share)) / max(compute_s, memory_s)

for the kernel's roofline times (GEMM and attention: their FLOPs and bytes; the memory-bound families:
bandwidth only; kernels of unknown work: SMs only), applied to the part of the kernel that overlaps the
collective. `sm_share` = channels / SMs; `hbm_share` = the collective's HBM bytes / its duration / the GPU's
bandwidth.

**Channels** follow NCCL's defaults (src/graph/search.cc, connect.cc, enqueue.cc of NCCL 2.18-2.27): the
topology search tries the per-channel speeds of its table (`INTRA_SPEEDS`, `INTER_SPEEDS` by
architecture) and keeps the most bandwidth in ring channels that fit the GPU's NVLink (`NVLINK_BW_PER_LINK`
x links; PCIe where the ring crosses it) and, across nodes, the NICs at their port speed; `ncclTopoDupChannels` doubles them when a channel is fast (>= 25 GB/s;
not on sm_90+ below 50 GB/s with more than 4 channels); `ncclTopoPostset` doubles them again. A collective
uses them all unless its message is under channels x 512 threads x 64 bytes (Simple protocol's threshold),
one channel less per step. This gives 24 channels inside an A100 or H100 NVSwitch node (of 108 / 132 SMs) and
16 across nodes with 8 NICs. NVLS (in-switch all-reduce) is not distinguished (16 channels on sm_90).

**HBM**: a ring moves nccl-tests' bus bytes (size x (n - 1) / n for all-gather and reduce-scatter, twice for
all-reduce) through each GPU; each byte sent is read from HBM and each byte received written to it
(`HBM_PASSES`: 2), and a reduction also reads the local operand it adds (3).

**Power** (Hopper): a part whose power cap binds (`sustained_clock`) runs its compute-bound tensor-core kernels
at the clock their mix sustains. A collective beside them draws power too (its NVLink, network and HBM traffic,
its SMs), and the cap takes it from the SM clock: `sustained_clock.overlap_ratio` derives the power a collective
adds from the one public observation (DeepGEMM issue #120, a Hopper GPU at its cap, 1,575 of 1,980 MHz while
computation overlapped communication) and gives the clock `r_o` at which the step's mix meets the cap with it.
A compute-bound tensor-core kernel's overlapped time (the union of its overlaps with the rank's collectives,
stretched by the SMs they take) runs a further `r / r_o` longer than at the step's sustained ratio `r`; a mix
well under the cap keeps its clock. Parts without a burst/sustained reference (Ampere and older: their
measurements carry the cap) and steps in bursts keep the SM and HBM shares alone.

The replay runs once, the contention is read from its schedule (`contended_devices`: each collective of a
launch, grouped ones too, ends with its launch after its own duration), and the replay runs again with the
slowed kernels (one correction: the second schedule's overlaps are not fed back). The collective itself is
not slowed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from maya.core.clusters import ClusterSpec
from maya.core.hardware import Hardware

from .engine import RankResult
from .opcodes import WORK, WORK_SYNC
from .program import Program
from .sustained_clock import SustainedClock, collective_power_share, overlap_ratio, power_rows
from .topology import GlobalComm, Replica
from .trace import TraceSet

NVLINK_BW_PER_LINK = {70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}
"""NCCL's usable GB/s per NVLink and direction by compute capability (src/graph/topo.h, SMxx_NVLINK_BW)."""
NVLINK_LINE_PER_LINK = {100: 50.0}
"""Line rate per NVLink and direction (GB/s): 25 for NVLink 2-4, 50 for NVLink 5 (sm_100): links = spec
bandwidth / line rate."""
DEFAULT_NVLINK_LINE = 25.0
PCIE_BW_PER_GEN, PCIE3_X16_GBS = 12.0, 15.75
"""NCCL's figure for a PCIe Gen3 x16 link (PCI_BW), doubling per generation; the link's line rate."""
INTRA_SPEEDS = {
    80: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
}
INTER_SPEEDS = {
    80: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2),
}
"""Per-channel speeds (GB/s) NCCL's ring search tries, fastest first (sm_90 tables from sm_90 on, the others
before)."""
MAX_SEARCH_CHANNELS, MAX_CHANNELS = 32, 64
DUP_MIN_SPEED, DUP_SM90_SPEED, DUP_SM90_CHANNELS = 25.0, 50.0, 4
SIMPLE_THREADS, SIMPLE_THREAD_THRESHOLD = 512, 64
"""Threads per channel and bytes per thread below which NCCL drops a channel (Simple protocol)."""
HBM_PASSES = {
    "allgather": 2.0,
    "broadcast": 2.0,
    "send": 2.0,
    "recv": 2.0,
    "alltoall": 2.0,
    "reducescatter": 3.0,
    "allreduce": 3.0,
    "reduce": 3.0,
}
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}
MAX_SHARE = 0.9
"""A collective never takes more than this share of SMs or bandwidth (guards short collectives' rates)."""
MEMORY_FAMILIES = frozenset({"elementwise", "reduction", "normalization", "softmax", "embedding", "optimizer", "copy"})


def ring_channels(hw: Hardware, cluster: ClusterSpec | None, nodes: int) -> int:
    """Channels of a communicator spanning `nodes` nodes of `cluster`, as NCCL's search and post-processing set
    them (see the module docstring)."""
    arch = hw.sm_major * 10 + hw.sm_minor
    table = 90 if arch >= 90 else 80
    gpu_bw = _gpu_bw(arch, cluster)
    inter = nodes > 1 and cluster is not None and cluster.network is not None

    def channels(speed: float) -> int:
        """Ring channels of this speed that fit: each crosses every GPU's links (and, across nodes, a NIC)."""
        fit = int(gpu_bw // speed)
        if inter:
            fit = min(fit, cluster.network.nics_per_node * int(cluster.network.nic_gbs // speed))
        return min(fit, MAX_SEARCH_CHANNELS)

    limit = min(gpu_bw, cluster.network.nic_gbs) if inter else gpu_bw
    speeds = [s for s in (INTER_SPEEDS if inter else INTRA_SPEEDS)[table] if s <= limit] or [
        (INTER_SPEEDS if inter else INTRA_SPEEDS)[table][-1]
    ]
    # the search keeps the most bandwidth (channels x speed), the faster speed on a tie
    speed = max(speeds, key=lambda s: (channels(s) * s, s))
    search = max(channels(speed), 1)
    if speed >= DUP_MIN_SPEED and not (arch > 80 and speed < DUP_SM90_SPEED and search > DUP_SM90_CHANNELS):
        search = min(2 * search, MAX_SEARCH_CHANNELS)
    return min(2 * search, MAX_CHANNELS)


def _gpu_bw(arch: int, cluster: ClusterSpec | None) -> float:
    """NCCL's bandwidth of a GPU's intra-node ring, GB/s: NVLink links x NCCL's per-link figure through NVSwitch,
    else PCIe (a ring through NVLink pairs crosses PCIe between them)."""
    if cluster is not None and cluster.nvlink is not None and cluster.p2p and cluster.nvlink.fabric == "nvswitch":
        line = NVLINK_LINE_PER_LINK.get(arch, DEFAULT_NVLINK_LINE)
        known = [k for k in NVLINK_BW_PER_LINK if k <= arch]
        per_link = NVLINK_BW_PER_LINK[max(known)] if known else NVLINK_BW_PER_LINK[70]
        return round(cluster.nvlink.gbs / line) * per_link
    generation = 4 if cluster is None else max(3, round(np.log2(cluster.pcie_gbs / PCIE3_X16_GBS)) + 3)
    return PCIE_BW_PER_GEN * 2 ** (generation - 3)


def footprints(
    names: np.ndarray,
    nbytes: np.ndarray,
    ranks: np.ndarray,
    nodes: np.ndarray,
    duration_ns: np.ndarray,
    hw: Hardware,
    cluster: ClusterSpec | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per collective call: the share of the GPU's SMs its channels hold and of its HBM bandwidth its copies
    take while it runs."""
    names = np.asarray(names, dtype=object).astype(str)
    size = np.nan_to_num(np.asarray(nbytes, dtype="float64"))
    members = np.asarray(ranks, dtype="float64")
    span = np.nan_to_num(np.asarray(nodes, dtype="float64"), nan=1.0).astype(np.int64)
    duration = np.asarray(duration_ns, dtype="float64")
    active = (members > 1) & (duration > 0) & (size > 0)
    spans = np.unique(span[active])
    most = np.zeros(len(size))
    for n in spans:
        most[span == n] = ring_channels(hw, cluster, int(n))
    channels = np.maximum(1.0, np.minimum(most, np.floor(size / (SIMPLE_THREADS * SIMPLE_THREAD_THRESHOLD))))
    sm = np.where(active, np.minimum(channels / hw.sm_count, MAX_SHARE), 0.0)
    factor = np.ones(len(size))
    passes = np.full(len(size), 2.0)
    for name, bus in BUS_FACTOR.items():
        here = names == name
        factor[here] = bus(members[here])
    for name, count in HBM_PASSES.items():
        passes[names == name] = count
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = passes * size * factor / (duration * 1e-9) / hw.memory_bandwidth
    hbm = np.where(active, np.minimum(rate, MAX_SHARE), 0.0)
    return sm, hbm


def slowdowns(
    family: np.ndarray,
    compute_s: np.ndarray,
    memory_s: np.ndarray,
    sm_share: np.ndarray | float,
    hbm_share: np.ndarray | float,
) -> np.ndarray:
    """Per kernel: how much longer its overlapped part takes beside a collective of these shares (>= 1)."""
    sm_factor, hbm_factor = 1.0 / (1.0 - np.asarray(sm_share)), 1.0 / (1.0 - np.asarray(hbm_share))
    known = (compute_s > 0) | (memory_s > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        roofline = np.maximum(compute_s * sm_factor, memory_s * hbm_factor) / np.maximum(compute_s, memory_s)
    return np.where(np.isin(family, list(MEMORY_FAMILIES)), hbm_factor, np.where(known, roofline, sm_factor))


def kernel_rooflines(frame: pd.DataFrame, hw: Hardware) -> tuple[np.ndarray, np.ndarray]:
    """Compute and memory roofline seconds of each call (0 where its FLOPs or bytes are unknown)."""
    dtype = frame["dtype"].astype(str).to_numpy()
    codes, names = pd.factorize(dtype)
    peak = np.array([hw.peak_flops(d) for d in names], dtype="float64")[codes] if len(codes) else np.zeros(0)
    flops = np.nan_to_num(frame["flops"].to_numpy(dtype="float64"))
    traffic = np.nan_to_num(frame["work_bytes"].to_numpy(dtype="float64"))
    return flops / peak, traffic / hw.memory_bandwidth


Shares = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""SM and HBM shares of the collective operations at these positions of `Program.launch_ops`."""


def contended_devices(
    program: Program,
    result: RankResult,
    device: np.ndarray,
    shares: Shares,
    hw: Hardware,
    clock: SustainedClock | None = None,
) -> tuple[np.ndarray, float | None]:
    """`device` with every kernel of `program` lengthened by its overlap with the rank's collectives (each ending
    with its launch in the first replay, `result`, after its own duration) times its slowdown beside each; the
    shares of only the collectives some kernel overlaps are asked for. `clock`: the sustained clock the
    program's compute-bound tensor-core kernels run at (None: not in the steady state or no reference), which a
    collective beside them lowers to `sustained_clock.overlap_ratio`. Also gives that lowered ratio when some
    such kernel overlapped a collective and ran slower for it (else None)."""
    coll = program.launch_ops
    kernels = np.flatnonzero(np.isin(program.opcodes, (WORK, WORK_SYNC)) & (device > 0))
    if not len(coll) or not len(kernels):
        return device, None
    launch_of = np.repeat(np.arange(len(program.launches)), [len(launch) for launch in program.launches])
    position = np.flatnonzero(device[coll] > 0)
    calls = coll[position]
    c_end = result.launch_end[launch_of[position]].astype("float64")
    c_start = c_end - device[calls]
    order = kernels[np.argsort(result.end[kernels] - device[kernels], kind="stable")]
    k_end = result.end[order].astype("float64")
    k_start = k_end - device[order]
    # candidates of each collective: kernels starting before it ends, from the first whose running maximum of
    # ends (kernels on several streams overlap one another) passes its start
    lo = np.searchsorted(np.maximum.accumulate(k_end), c_start, side="right")
    hi = np.searchsorted(k_start, c_end, side="left")
    counts = np.maximum(hi - lo, 0)
    if not counts.sum():
        return device, None
    pair_c = np.repeat(np.arange(len(calls)), counts)
    pair_k = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
    o_start = np.maximum(k_start[pair_k], c_start[pair_c])
    o_end = np.minimum(k_end[pair_k], c_end[pair_c])
    hit = o_end > o_start
    if not hit.any():
        return device, None
    pair_c, pair_k, o_start, o_end = pair_c[hit], pair_k[hit], o_start[hit], o_end[hit]
    needed, pair_c = np.unique(pair_c, return_inverse=True)
    sm_share, hbm_share = shares(position[needed])
    frame = program.frame
    compute_s, memory_s = kernel_rooflines(frame, hw)
    kernel_calls = order[pair_k]
    factor = slowdowns(
        frame["family"].astype(str).to_numpy()[kernel_calls],
        compute_s[kernel_calls],
        memory_s[kernel_calls],
        sm_share[pair_c],
        hbm_share[pair_c],
    )
    extra = np.zeros(len(device))
    np.add.at(extra, kernel_calls, (o_end - o_start) * (factor - 1.0))
    lowered = None if clock is None else overlap_ratio(clock, hw)
    tensor = power_rows(frame, hw)[kernel_calls] if lowered is not None and lowered < clock.ratio else None
    if tensor is not None and tensor.any():
        covered = _covered(kernel_calls[tensor], o_start[tensor], o_end[tensor], len(device))
        extra += (covered + np.where(covered > 0, extra, 0.0)) * (clock.ratio / lowered - 1.0)
    else:
        lowered = None
    return device + np.rint(extra).astype(np.int64), lowered


def _covered(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    """Per group (0..size-1): the length the union of its intervals covers (overlapping intervals count once)."""
    order = np.lexsort((starts, groups))
    groups, starts, ends = groups[order], starts[order], ends[order]
    reach = pd.Series(ends).groupby(groups).cummax().to_numpy()
    before = np.r_[-np.inf, reach[:-1]]
    before[np.r_[True, groups[1:] != groups[:-1]]] = -np.inf
    out = np.zeros(size)
    np.add.at(out, groups, np.maximum(ends - np.maximum(starts, before), 0.0))
    return out


def power_note(hw: Hardware, lowered: float, clock: SustainedClock) -> str:
    """The note on a collective lowering the clock of the tensor-core kernels beside it (see the module
    docstring)."""
    share = collective_power_share(hw)
    alone = "their burst clock" if clock.ratio >= 1 else f"the step's sustained {clock.ratio:.3f}"
    return (
        f"power cap beside collectives: {hw.name}'s compute-bound tensor-core kernels run at {lowered:.3f} x their "
        f"burst clock (~{lowered * hw.boost_clock_mhz:,.0f} MHz) while a collective runs beside them, not at "
        f"{alone}: their mix (~{clock.demand_w:,.0f} W at the burst clock) and the "
        f"collective's traffic (~{share * clock.cap_w:,.0f} W, from one public observation of a Hopper GPU at its "
        f"cap, DeepGEMM issue #120) share the {clock.cap_w:,.0f} W cap"
    )


def contend(
    traces: TraceSet,
    replicas: list[Replica],
    comms: list[GlobalComm],
    devices: list[np.ndarray],
    results: list[RankResult],
    hw: Hardware,
    cluster: ClusterSpec | None,
    clocks: dict[int, SustainedClock] | None = None,
) -> tuple[list[np.ndarray], list[str]]:
    """Device times with the contention of each rank's collectives on its kernels, read from a replay's
    `results`, and a note when a collective lowered the power-capped clock of a kernel beside it. A program's
    copies (deduplicated ranks) get the stretch of its captured replica; replicas that shared a device array
    share the new one. `clocks`: the sustained clock of each program (by rank) in the steady state
    (`sustained_clock.apply`)."""
    clocks = clocks or {}
    stretch: dict[int, np.ndarray] = {}
    lowest: tuple[float, SustainedClock] | None = None
    for replica, device, result in zip(replicas, devices, results):
        if not replica.captured or id(replica.program) in stretch:
            continue

        def shares(positions: np.ndarray, replica: Replica = replica, device: np.ndarray = device):
            return _shares(traces, replica, comms, device, hw, cluster, positions)

        clock = clocks.get(replica.program.rank)
        contended, lowered = contended_devices(replica.program, result, device, shares, hw, clock)
        stretch[id(replica.program)] = contended - device
        if lowered is not None and (lowest is None or lowered < lowest[0]):
            lowest = (lowered, clock)
    if not any(extra.any() for extra in stretch.values()):
        return devices, []
    out: dict[int, np.ndarray] = {}
    for replica, device in zip(replicas, devices):
        if id(device) not in out:
            extra = stretch.get(id(replica.program))
            out[id(device)] = device if extra is None else device + extra
    return [out[id(device)] for device in devices], [] if lowest is None else [power_note(hw, *lowest)]


def _shares(
    traces: TraceSet,
    replica: Replica,
    comms: list[GlobalComm],
    device: np.ndarray,
    hw: Hardware,
    cluster: ClusterSpec | None,
    positions: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """SM and HBM shares of the replica's collective operations at `positions` of `launch_ops`."""
    program = replica.program
    ops = [op for launch in program.launches for op in launch]
    keys = [key for launch_keys in replica.keys for key in launch_keys]
    calls, ranks, nodes = [], [], []
    for j in positions:
        op, (key, expected) = ops[j], keys[j]
        calls.append(op.call)
        ranks.append(expected)
        nodes.append(len({traces.node_of(key[1]), traces.node_of(key[2])}) if op.p2p else comms[key[0]].nodes)
    rows = np.asarray(calls, dtype=np.int64)
    frame = program.frame
    return footprints(
        frame["collective"].to_numpy()[rows],
        frame["comm_bytes"].to_numpy()[rows],
        np.asarray(ranks),
        np.asarray(nodes, dtype="float64"),
        device[rows].astype("float64"),
        hw,
        cluster,
    )
