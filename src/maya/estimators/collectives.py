"""NCCL collective times on a cluster: an alpha-beta model per algorithm (ring, tree, NVLS) and
protocol (LL, Simple), the fastest candidate chosen as NCCL's own tuner does.

    time = base latency + hops x per-hop latency + S x factor / bus bandwidth

`S` is the size nccl-tests reports (all-reduce, broadcast, reduce, send/recv: the buffer; all-gather:
the gathered output; reduce-scatter: the input; all-to-all: the bytes each rank sends) and `factor`
is nccl-tests' bus-bandwidth factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all
(n-1)/n; others 1), so a large message runs at the cluster's published nccl-tests bus bandwidth.
Latencies are NCCL's tuning model (`baseLat` / `hwLat` of `src/graph/tuning.cc`): per link class,
NVLink, PCIe and network (InfiniBand and RoCE alike).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from maya_trace_spec.vocabulary import collective_name

from maya.core.clusters import ClusterSpec, load_cluster

PRICED_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv")
"""What the model prices: send and recv are one point-to-point transfer, `sendrecv`."""


def priced_name(collective: str) -> str | None:
    """The priced collective of any spelling of a collective's name (None for gather, scatter, barrier...)."""
    name = collective_name(collective)
    name = "sendrecv" if name in ("send", "recv") else name
    return name if name in PRICED_COLLECTIVES else None

BASE_LATENCY_US = {("ring", "LL"): 6.6, ("ring", "simple"): 8.4, ("tree", "LL"): 6.8, ("tree", "simple"): 8.4,
                   ("nvls", "simple"): 0.0}
"""NCCL `baseLat`: fixed cost of a collective per algorithm and protocol, microseconds."""
HOP_LATENCY_US = {
    "nvlink": {("ring", "LL"): 0.6, ("ring", "simple"): 3.4, ("tree", "LL"): 0.6, ("tree", "simple"): 4.0,
               ("nvls", "simple"): 25.0},
    "pcie": {("ring", "LL"): 1.0, ("ring", "simple"): 5.7, ("tree", "LL"): 1.0, ("tree", "simple"): 4.0},
    "network": {("ring", "LL"): 2.7, ("ring", "simple"): 14.0, ("tree", "LL"): 5.0, ("tree", "simple"): 14.0},
}
"""NCCL `hwLat`: cost of one hop per link class, algorithm and protocol, microseconds."""
LL_BANDWIDTH = {"ring": 0.5, "tree": 1 / 3.8}
"""Share of the bus bandwidth the LL protocol reaches (flags travel with the data), per NCCL's model."""
TREE_BANDWIDTH = 0.92
"""Tree all-reduce bus bandwidth relative to the ring's, per NCCL's model."""


@dataclass(frozen=True)
class CollectiveTime:
    seconds: np.ndarray
    algorithm: np.ndarray
    protocol: np.ndarray


class CollectiveModel:
    def __init__(self, cluster: ClusterSpec | str):
        self.cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster

    def time(self, collective: str, nbytes: float | np.ndarray, ranks: int, nodes: int | None = None, *,
             algorithm: str | None = None) -> CollectiveTime:
        """Fastest (or the named `algorithm`'s) time of `collective` over `ranks` GPUs on `nodes` nodes
        (default: packed, `gpus_per_node` per node) for each size in `nbytes`."""
        name = priced_name(collective)
        if name is None:
            raise ValueError(f"unknown collective {collective!r}; known: {', '.join(PRICED_COLLECTIVES)}")
        size = np.atleast_1d(np.asarray(nbytes, dtype="float64"))
        nodes = nodes or -(-ranks // self.cluster.gpus_per_node)
        candidates = [c for c in self._candidates(name, size, ranks, nodes) if algorithm in (None, c[0])]
        if not candidates:
            raise ValueError(f"{algorithm!r} does not run {name} on {ranks} ranks over {nodes} node(s)")
        times = np.stack([c[2] for c in candidates])
        best = np.argmin(times, axis=0)
        return CollectiveTime(seconds=times[best, np.arange(len(size))] * 1e-6,
                              algorithm=np.array([c[0] for c in candidates], dtype=object)[best],
                              protocol=np.array([c[1] for c in candidates], dtype=object)[best])

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` (columns `collective`, `bytes`, `ranks`, optional `nodes`) with `duration_ns`,
        `algorithm` and `protocol` added."""
        out = frame.copy()
        nodes = frame["nodes"] if "nodes" in frame else pd.Series(0, index=frame.index)
        out["duration_ns"], out["algorithm"], out["protocol"] = np.nan, None, None
        for (collective, ranks, n), rows in frame.groupby([frame["collective"], frame["ranks"], nodes]).groups.items():
            result = self.time(collective, frame.loc[rows, "bytes"].to_numpy(), int(ranks), int(n) or None)
            out.loc[rows, "duration_ns"] = result.seconds * 1e9
            out.loc[rows, "algorithm"], out.loc[rows, "protocol"] = result.algorithm, result.protocol
        return out

    def _candidates(self, name: str, size: np.ndarray, ranks: int, nodes: int):
        """(algorithm, protocol, microseconds) of every way NCCL could run the collective."""
        if ranks <= 1:
            yield "local", "none", np.zeros_like(size)
            return
        cluster, intra = self.cluster, self.cluster.intra_link
        bus = (cluster.intra_busbw_gbs if nodes == 1 else cluster.network_busbw_gbs) * 1e3  # bytes per us
        if name == "sendrecv":
            bandwidth = bus if nodes == 1 else cluster.nic_busbw_gbs * 1e3
            for protocol in ("LL", "simple"):
                hop = HOP_LATENCY_US[intra if nodes == 1 else "network"][("ring", protocol)]
                latency = BASE_LATENCY_US[("ring", protocol)] + hop
                yield "p2p", protocol, latency + size / self._ll("ring", protocol, bandwidth)
            return
        if name == "alltoall":
            yield "p2p", "simple", self._alltoall(size, ranks, nodes)
            return
        factor = {"allreduce": 2 * (ranks - 1) / ranks, "allgather": (ranks - 1) / ranks,
                  "reducescatter": (ranks - 1) / ranks}.get(name, 1.0)
        hops = {"allreduce": 2 * (ranks - 1)}.get(name, ranks - 1)
        network_hops = {"allreduce": 2 * (nodes - 1)}.get(name, nodes - 1)
        for protocol in ("LL", "simple"):
            step = ("ring", protocol)
            latency = (BASE_LATENCY_US[step] + (hops - network_hops) * HOP_LATENCY_US[intra][step]
                       + network_hops * HOP_LATENCY_US["network"][step])
            yield "ring", protocol, latency + size * factor / self._ll("ring", protocol, bus)
        if name == "allreduce" and nodes > 1:
            per_node = ranks // nodes
            for protocol in ("LL", "simple"):
                latency = BASE_LATENCY_US[("tree", protocol)] + 2 * (
                    (per_node - 1) * HOP_LATENCY_US[intra][("tree", protocol)]
                    + np.log2(nodes) * HOP_LATENCY_US["network"][("tree", protocol)])
                yield "tree", protocol, latency + 2 * size / self._ll("tree", protocol, TREE_BANDWIDTH * bus)
        if name == "allreduce" and nodes == 1 and cluster.nvls_busbw_gbs:
            yield "nvls", "simple", (BASE_LATENCY_US[("nvls", "simple")] + HOP_LATENCY_US["nvlink"][("nvls", "simple")]
                                     + size * factor / (cluster.nvls_busbw_gbs * 1e3))

    def _alltoall(self, size: np.ndarray, ranks: int, nodes: int) -> np.ndarray:
        """Every rank sends S / n to each peer at once: local peers over the intra-node link, remote
        peers over the node's NICs shared by its GPUs; the slower part sets the time."""
        cluster = self.cluster
        local = min(ranks, cluster.gpus_per_node) if nodes > 1 else ranks
        link = cluster.intra_link if nodes == 1 else "network"
        latency = BASE_LATENCY_US[("ring", "simple")] + HOP_LATENCY_US[link][("ring", "simple")]
        intra_time = size * (local - 1) / ranks / (cluster.intra_busbw_gbs * 1e3)
        nic_share = cluster.nics_per_node * cluster.nic_busbw_gbs * 1e3 / local
        inter_time = size * (ranks - local) / ranks / nic_share
        return latency + np.maximum(intra_time, inter_time)

    @staticmethod
    def _ll(algorithm: str, protocol: str, bandwidth: float) -> float:
        return bandwidth * LL_BANDWIDTH[algorithm] if protocol == "LL" else bandwidth
