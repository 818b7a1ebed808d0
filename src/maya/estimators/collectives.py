"""NCCL collective times on a cluster: NCCL's algorithms (ring, tree, NVLS, point-to-point) and protocols
(LL, LL128, Simple) priced on the links they cross, the fastest chosen as NCCL's tuner does.

    time = base(protocol) + steps x mean hop latency(link, protocol) + S x factor / bus bandwidth

`S` is the size nccl-tests reports (all-reduce, broadcast, reduce, send/recv: the buffer; all-gather: the
gathered output; reduce-scatter: the input; all-to-all: the bytes each rank sends); `factor` is nccl-tests'
bus-bandwidth factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter (n-1)/n; others 1). The bus bandwidth
is that of the ring's slowest hop: a link's spec line rate (`ClusterSpec`) times the share NCCL reaches on
that kind of link, and across nodes what the node's network carries. On nodes whose NVLink joins pairs,
the ring crosses PCIe between pairs, so PCIe sets its bandwidth. Shares and protocol bandwidth ratios are
learned from measurements (`CollectiveParams`), latencies inside a node are NCCL's tuning model's, and so are
those across a described network (InfiniBand, RoCE NICs: `NCCL_NET_HOP_US`), counted as NCCL counts a ring's
steps across nodes (`nodes - 1` network steps, twice for an all-reduce; the other steps at least NCCL's
per-step network overhead); an undescribed network's step latency is learned with its bandwidth. NVLS
(in-switch reduction) moves S each way per GPU after NCCL's NVLS latency (25 us, no per-hop term), a tree
all-reduce runs at 0.92 x half the ring's bus bandwidth (NCCL's own tree model). A send/recv takes only the
protocols NCCL's point-to-point path has: LL up to `NCCL_P2P_LL_THRESHOLD` (16 KiB), Simple (`enqueue.cc`;
never LL128).

A cluster whose spec names the measured machine it is (`measured_as`) prices what that machine measured inside a
node from its own curves instead (`CollectiveModel`, `collective_measured`); clusters never measured keep the model.

A send/recv is priced as the transfer the receiver waits for. Timed on the sender (`sender=True`, as Vidur
measured), a Simple-protocol send between Ampere GPUs on NVLink ends one FIFO earlier: there NCCL's P2P
transport reads (the receiver pulls from the sender's FIFO, `ncclTopoCheckP2p`: "P2P Read for Ampere/NVLink
only"), so the sender's kernel returns once its last chunk is in its own FIFO of `NCCL_BUFFSIZE` (4 MiB by
default, NCCL's environment documentation) while the receiver still pulls up to that much.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from maya.core import hardware
from maya.core.clusters import NETWORK, NVLINK, NVSWITCH, PCIE, SHM, ClusterSpec, ClusterSpecError, load_cluster
from maya_trace_spec.vocabulary import collective_name

from .collective_measured import MeasuredCollectives, bus_factor, shipped_measured
from .collective_params import CollectiveParams, NetworkParams, shipped_params

PRICED_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv")
"""What the model prices: send and recv are one point-to-point transfer, `sendrecv`."""


def priced_name(collective: str) -> str | None:
    """The priced collective of any spelling of a collective's name (None for gather, scatter, barrier...)."""
    name = collective_name(collective)
    name = "sendrecv" if name in ("send", "recv") else name
    return name if name in PRICED_COLLECTIVES else None


P2P_READ_FIFO_BYTES = 4 * 2**20
"""Simple protocol's FIFO per peer (`NCCL_BUFFSIZE` default): what a reading receiver may still pull when the
sender returns."""
P2P_READ_CAPABILITY = (8, 0)
"""Compute capability NCCL enables P2P reads for over NVLink by default (Ampere sm_80)."""

P2P_LL_THRESHOLD = 16 * 2**10
"""Largest send/recv NCCL moves with the LL protocol (`NCCL_P2P_LL_THRESHOLD` default); larger ones use Simple
(LL's fitted bandwidth is an effective figure, so below it the model may still price Simple, keeping time monotone
in size)."""
NCCL_NET_HOP_US = {
    "ring": {"LL": 2.7, "LL128": 4.0, "simple": 14.0},
    "tree": {"LL": 5.0, "LL128": 8.5, "simple": 14.0},
}
"""Latency of one step across a described inter-node network per algorithm and protocol: NCCL's tuning model
(`src/graph/tuning.cc`, `hwLat[NCCL_HW_NET]`; the ring's row unchanged from 2.18 to 2.29, the tree's since 2.23)."""
NCCL_NET_OVERHEAD_US = 1.0
"""What NCCL's proxy pays to post a network step (`getNetOverhead`: 1 us, 2 on AMD CPUs): every step of a ring
that spans nodes takes at least this, three times with Simple (`tuning.cc`: `intraLat = max(intraLat,
netOverhead)`)."""
TREE_BANDWIDTH = 0.92
"""Tree all-reduce bus bandwidth relative to the ring's, per NCCL's tuning model."""
MEASURED_BLEND = (8 * 2**20, 32 * 2**20)
"""Sizes over which a measured machine's price moves from the model's (scaled, below) to its curve's alone (above),
linearly in log size, so price stays continuous where the curve and the model disagree. Vidur's times include
waiting for the peer that launched later (10-60 us, `data/collectives/README.md`; the DGX A100's 2-GPU all-reduces
take ~50 us up to 1 MB whatever the size), so a measured time bounds the transfer from above; from 32 MiB that wait
is a smaller part of it (what it may weigh: docs/estimators-and-data.md) and NCCL runs the Simple protocol (the 8-GPU
curve's LL128 kink lies below)."""
HALF_OF_ALLREDUCE = ("allgather", "reducescatter")
"""Collectives a measured machine did not time, priced as half its measured all-reduce of the same size: NCCL's
ring all-reduce is a reduce-scatter then an all-gather over the same ring (n - 1 steps and S (n - 1) / n bus
bytes each)."""


@dataclass(frozen=True)
class CollectiveTime:
    seconds: np.ndarray
    algorithm: np.ndarray
    protocol: np.ndarray


@dataclass(frozen=True)
class _Network:
    gpu_gbs: float
    node_gbs: float
    hop_us: float
    """Simple-protocol step latency of an undescribed network (learned); a described one takes NCCL's."""
    described: bool = False

    def ring_gbs(self, per_node: int) -> float:
        return min(per_node * self.gpu_gbs, self.node_gbs)


class CollectiveModel:
    """`cluster`: a `ClusterSpec`, a shipped name or a spec file; `params`: learned figures (default the
    shipped fit); `network`: which measured network prices an undescribed one (default their mean); `measured`:
    the measured machines' curves (default the shipped ones; None: the model alone).

    A cluster that is a measured machine (`ClusterSpec.measured_as`) has the collectives that machine measured
    inside one node priced from its curve (`collective_measured`) for its GPU count, all-gathers and
    reduce-scatters as half its all-reduce (`HALF_OF_ALLREDUCE`), and send/recv as the sender's measured time plus
    what the model says the receiver waits longer, from the top of `MEASURED_BLEND` up (`algorithm` "measured",
    `protocol` the machine); below its bottom they take the model's time, scaled down by the measured / modelled
    ratio there where that is under 1 (a measured time bounds the transfer from above), and in between a blend of
    the two, so time stays continuous and rising in size. A GPU count the machine did not time, between (or past)
    those it did, takes the model's time scaled by the measured / modelled ratio of its nearest measured counts at
    that size (`_count_ratio`); and no count takes less than a smaller one of the same node (the DGX's 8-GPU curve
    runs at a higher bus bandwidth than its 4-GPU one and would pass under it near 500 MiB). Everything else (other
    collectives or layouts, several nodes, an explicit `algorithm`) is the model's."""

    def __init__(
        self,
        cluster: ClusterSpec | str | Path,
        params: CollectiveParams | None = None,
        *,
        network: str | None = None,
        measured: MeasuredCollectives | Literal["shipped"] | None = "shipped",
    ):
        self.cluster = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
        self.params = params or shipped_params()
        if network is not None and network not in self.params.networks:
            raise ValueError(f"no measured network {network!r}; known: {', '.join(sorted(self.params.networks))}")
        self._network = self._network_of(network)
        self._ampere = self._is_ampere()
        if isinstance(measured, str) and measured != "shipped":
            raise ValueError(f"measured must be 'shipped', None or a MeasuredCollectives, not {measured!r}")
        self.machine = self.cluster.measured_as if measured is not None else None
        self._measured = None
        if self.machine is not None:
            self._measured = shipped_measured() if measured == "shipped" else measured
        if self.machine is not None and self.machine not in self._measured.machines:
            raise ClusterSpecError(
                f"cluster {self.cluster.name!r} is measured as {self.machine!r}, which no measurement names; "
                f"measured machines: {', '.join(sorted(self._measured.machines))}"
            )

    def time(
        self,
        collective: str,
        nbytes: float | np.ndarray,
        ranks: int,
        nodes: int | None = None,
        *,
        algorithm: str | None = None,
        gpus: Sequence[int] | None = None,
        sender: bool = False,
    ) -> CollectiveTime:
        """Fastest (or the named `algorithm`'s) time of `collective` over `ranks` GPUs on `nodes` nodes (default:
        packed, `gpus_per_node` per node) for each size in `nbytes`. `gpus`: the local indices of the GPUs each
        node contributes (for send/recv inside a node, the two ends; default the first ones). `sender`: a
        send/recv as timed on the sender (see the module's docstring) instead of the whole transfer."""
        name = priced_name(collective)
        if name is None:
            raise ValueError(f"unknown collective {collective!r}; known: {', '.join(PRICED_COLLECTIVES)}")
        size = np.atleast_1d(np.asarray(nbytes, dtype="float64"))
        nodes, gpus = self._layout(name, ranks, nodes, gpus)
        counts = self._measured_counts(name, ranks, nodes, gpus) if algorithm is None else []
        modelled = self._modelled(name, size, ranks, nodes, gpus, sender, algorithm)
        if not counts:
            return modelled
        ratios = {
            c: self._measured_ratio(name, size, c, gpus if c == ranks else tuple(range(c)), sender) for c in counts
        }

        def own(n: int) -> np.ndarray:
            model = modelled if n == ranks else self._modelled(name, size, n, 1, tuple(range(n)), sender, None)
            return self._count_ratio(ratios, n) * model.seconds

        seconds, lower = np.zeros_like(size), 1  # the measured counts up to `ranks`, each never under the last
        for n in sorted(c for c in counts if c <= ranks):
            seconds, lower = np.maximum(own(n), seconds), n
        if lower != ranks:  # never under a smaller count, never over the next measured one
            floor = seconds
            for n in range(lower + 1, ranks + 1):
                seconds = np.maximum(seconds, own(n))
            upper = min((c for c in counts if c > ranks), default=None)
            if upper is not None:
                seconds = np.minimum(seconds, np.maximum(own(upper), floor))
        measured = (size > MEASURED_BLEND[0]) & (ranks in counts)
        return CollectiveTime(
            seconds=seconds,
            algorithm=np.where(measured, "measured", modelled.algorithm).astype(object),
            protocol=np.where(measured, self.machine, modelled.protocol).astype(object),
        )

    @staticmethod
    def _count_ratio(ratios: dict[int, np.ndarray], ranks: int) -> np.ndarray:
        """The measured / modelled ratio on `ranks` GPUs: its own where measured, else its nearest measured
        counts' (geometric, weighted linearly in GPUs; past the measured counts the nearest one's)."""
        if ranks in ratios:
            return ratios[ranks]
        lower = max([c for c in ratios if c < ranks], default=min(ratios))
        upper = min([c for c in ratios if c > ranks], default=max(ratios))
        weight = (ranks - lower) / (upper - lower) if upper != lower else 0.0
        return ratios[lower] ** (1 - weight) * ratios[upper] ** weight

    def _measured_ratio(
        self, name: str, size: np.ndarray, ranks: int, gpus: tuple[int, ...], sender: bool
    ) -> np.ndarray:
        """The measured machine's price over the model's of each size on `ranks` GPUs it measured: the model's
        scaled by the measured / modelled ratio at the bottom of `MEASURED_BLEND` (if under 1) below it, the curve's
        above it, in between a blend linear in log size."""
        curve = self._measured.curve(self.machine, "allreduce" if name in HALF_OF_ALLREDUCE else name, ranks)
        both = np.append(size, MEASURED_BLEND[0])  # the sizes, then where the curve starts to count
        model_us = self._modelled(name, both, ranks, 1, gpus, sender, None).seconds * 1e6
        links = [self.cluster.link_between(*gpus[:2])] if name == "sendrecv" else self.cluster.ring(gpus)
        us = curve.time_us(both, min(self.cluster.link_gbs(link) for link in links))
        us = us / (2 if name in HALF_OF_ALLREDUCE else 1)
        if name == "sendrecv" and not sender:  # measured on the sender: add what the receiver waits longer
            us = us + model_us - self._modelled(name, both, ranks, 1, gpus, True, None).seconds * 1e6
        ratio = us / model_us
        below = min(ratio[-1], 1.0)
        lo, hi = np.log(MEASURED_BLEND)
        weight = np.clip((np.log(np.maximum(size, 1.0)) - lo) / (hi - lo), 0.0, 1.0)
        return below ** (1 - weight) * ratio[:-1] ** weight

    def _modelled(
        self,
        name: str,
        size: np.ndarray,
        ranks: int,
        nodes: int,
        gpus: tuple[int, ...],
        sender: bool,
        algorithm: str | None,
    ) -> CollectiveTime:
        """The model's fastest (or `algorithm`'s) way to run the collective."""
        candidates = [c for c in self._candidates(name, size, ranks, nodes, gpus, sender) if algorithm in (None, c[0])]
        if not candidates:
            raise ValueError(f"{algorithm!r} does not run {name} on {ranks} ranks over {nodes} node(s)")
        times = np.stack([c[2] for c in candidates])
        best = np.argmin(times, axis=0)
        return CollectiveTime(
            seconds=times[best, np.arange(len(size))] * 1e-6,
            algorithm=np.array([c[0] for c in candidates], dtype=object)[best],
            protocol=np.array([c[1] for c in candidates], dtype=object)[best],
        )

    def _measured_counts(self, name: str, ranks: int, nodes: int, gpus: tuple[int, ...]) -> list[int]:
        """The GPU counts the measured machine timed this collective on, if it did on these links (the
        measurements ran on a node's first GPUs); none where its curves do not price it."""
        if self.machine is None or nodes != 1 or ranks < 2:
            return []
        if name == "sendrecv":
            if self.cluster.link_between(*gpus[:2]) != self.cluster.link_between(0, 1):
                return []
        elif sorted(self.cluster.ring(gpus)) != sorted(self.cluster.ring(range(len(gpus)))):
            return []
        return self._measured.counts(self.machine, "allreduce" if name in HALF_OF_ALLREDUCE else name)

    def predict(self, frame: pd.DataFrame, *, sender: bool = False) -> pd.DataFrame:
        """`frame` (columns `collective`, `bytes`, `ranks`, optional `nodes` and `gpus`: tuples of local GPU
        indices) with `duration_ns`, `algorithm` and `protocol` added; `sender` as in `time`."""
        out = frame.copy()
        nodes = frame["nodes"] if "nodes" in frame else pd.Series(0, index=frame.index)
        gpus = frame["gpus"] if "gpus" in frame else pd.Series([()] * len(frame), index=frame.index, dtype=object)
        gpus = gpus.map(lambda g: tuple(g) if g is not None and not (isinstance(g, float) and math.isnan(g)) else ())
        out["duration_ns"], out["algorithm"], out["protocol"] = np.nan, None, None
        keys = [frame["collective"], frame["ranks"], nodes, gpus]
        for (collective, ranks, n, local), rows in frame.groupby(keys, sort=False).groups.items():
            result = self.time(
                collective,
                frame.loc[rows, "bytes"].to_numpy(),
                int(ranks),
                int(n) or None,
                gpus=local or None,
                sender=sender,
            )
            out.loc[rows, "duration_ns"] = result.seconds * 1e9
            out.loc[rows, "algorithm"], out.loc[rows, "protocol"] = result.algorithm, result.protocol
        return out

    def _layout(
        self, name: str, ranks: int, nodes: int | None, gpus: Sequence[int] | None
    ) -> tuple[int, tuple[int, ...]]:
        """Nodes and the local GPUs of each, checked against the cluster."""
        per_node_max = self.cluster.gpus_per_node
        nodes = nodes or -(-ranks // per_node_max)
        if ranks < 1 or not 1 <= nodes <= ranks:
            raise ValueError(f"{ranks} rank(s) on {nodes} node(s): need 1 <= nodes <= ranks")
        if name == "sendrecv" and ranks > 1 and nodes not in (1, 2):
            raise ValueError(f"send/recv joins two ranks on one or two nodes, not {nodes}")
        per_node = 2 if name == "sendrecv" and nodes == 1 else -(-ranks // nodes)
        if per_node > per_node_max:
            raise ValueError(
                f"{ranks} ranks on {nodes} node(s) of cluster {self.cluster.name!r} put {per_node} on a "
                f"node of {per_node_max} GPUs"
            )
        local = tuple(gpus) if gpus else tuple(range(per_node if name != "sendrecv" or nodes == 1 else 1))
        if len(set(local)) != len(local) or not all(0 <= g < per_node_max for g in local):
            raise ValueError(f"local GPUs {local} are not distinct GPUs of a {per_node_max}-GPU node")
        return nodes, local

    def _network_of(self, name: str | None) -> _Network:
        p, net = self.params, self.cluster.network
        if net is not None:  # a described network: its NICs at the PCIe link's share
            share = p.links[PCIE].efficiency
            simple = NCCL_NET_HOP_US["ring"]["simple"]
            return _Network(net.nic_gbs * share, net.nics_per_node * net.nic_gbs * share, simple, described=True)
        measured: NetworkParams = p.networks[name] if name else p.default_network
        return _Network(measured.gpu_gbs, measured.node_gbs, measured.hop_us)

    def _hop_us(self, link: str, protocol: str, algorithm: str = "ring") -> float:
        if link == NETWORK and self._network.described:
            return NCCL_NET_HOP_US[algorithm][protocol]
        base = self._network.hop_us if link == NETWORK else self.params.links[link].hop_us
        return base * (1.0 if protocol == "simple" else self.params.hop_ratio[protocol])

    def _ring_latency_us(self, name: str, protocol: str, steps: int, nodes: int, chain: list[str]) -> float:
        """NCCL's ring latency: its base, then each step's hop. Inside one node the hops are the ring's links;
        across nodes `nodes - 1` steps (twice that for an all-reduce) cross the network and the others cost at
        least NCCL's per-step network overhead (`tuning.cc`)."""
        p = self.params
        if nodes == 1:
            return p.base_us[protocol] + steps * float(np.mean([self._hop_us(h, protocol) for h in chain]))
        inter = (2 if name == "allreduce" else 1) * (nodes - 1)
        overhead = NCCL_NET_OVERHEAD_US * (3 if protocol == "simple" else 1)
        intra = max(float(np.mean([self._hop_us(h, protocol) for h in chain] or [0.0])), overhead)
        return p.base_us[protocol] + (steps - inter) * intra + inter * self._hop_us(NETWORK, protocol)

    def _link_gbs(self, link: str) -> float:
        """Simple-protocol ring bus bandwidth of one intra-node link class."""
        return self.cluster.link_gbs(link) * self.params.links[link].efficiency

    def _protocols(self, hops: list[str]) -> tuple[str, ...]:
        """LL128 needs NVLink (or the network) on every hop: PCIe does not keep its 128-byte stores whole."""
        return ("LL", "simple") if {PCIE, SHM} & set(hops) else ("LL", "LL128", "simple")

    def _bandwidth(self, protocol: str, gbs: float) -> float:
        """Bytes per microsecond."""
        return gbs * 1e3 * (1.0 if protocol == "simple" else self.params.bandwidth_ratio[protocol])

    def _reads_peer(self, link: str) -> bool:
        """Whether NCCL's P2P transport reads from the peer on `link` (NVLink between Ampere sm_80 GPUs)."""
        return link in (NVLINK, NVSWITCH) and self._ampere

    def _is_ampere(self) -> bool:
        try:
            part = hardware.get(self.cluster.hardware) if self.cluster.hardware else None
        except hardware.UnknownHardware:
            return False
        return part is not None and (part.sm_major, part.sm_minor) == P2P_READ_CAPABILITY

    def _candidates(
        self, name: str, size: np.ndarray, ranks: int, nodes: int, gpus: tuple[int, ...], sender: bool = False
    ) -> Iterator[tuple[str, str, np.ndarray]]:
        """(algorithm, protocol, microseconds) of every way NCCL could run the collective."""
        if ranks <= 1:
            yield "local", "none", np.zeros_like(size)
            return
        p = self.params
        if name == "sendrecv":
            link = self.cluster.link_between(*gpus[:2]) if nodes == 1 else NETWORK
            gbs = (self._link_gbs(link) if nodes == 1 else self._network.gpu_gbs) * p.p2p_gain
            ahead = P2P_READ_FIFO_BYTES if sender and nodes == 1 and self._reads_peer(link) else 0.0
            for protocol, mine in (("LL", size <= P2P_LL_THRESHOLD), ("simple", np.full(size.shape, True))):
                latency = p.base_us[protocol] + self._hop_us(link, protocol)
                wire = np.maximum(size - ahead, 0.0) if protocol == "simple" else size  # LL writes
                yield "p2p", protocol, np.where(mine, latency + wire / self._bandwidth(protocol, gbs), np.inf)
            return
        per_node = -(-ranks // nodes)
        ring = self.cluster.ring(gpus)
        chain = ring[:-1] if nodes > 1 else ring  # across nodes the ring leaves each node from its last GPU
        hops = chain * nodes + [NETWORK] * (nodes if nodes > 1 else 0)
        gbs = min([self._link_gbs(h) for h in set(chain)] + ([self._network.ring_gbs(per_node)] if nodes > 1 else []))
        if name == "alltoall":
            yield "p2p", "simple", self._alltoall(size, ranks, nodes, ring)
            return
        factor = bus_factor(name, ranks)
        steps = 2 * (ranks - 1) if name == "allreduce" else ranks - 1
        for protocol in self._protocols(hops):
            latency = self._ring_latency_us(name, protocol, steps, nodes, chain)
            yield "ring", protocol, latency + size * factor / self._bandwidth(protocol, gbs)
        if name == "allreduce" and nodes > 1:  # a chain inside each node, a binary tree across nodes
            for protocol in self._protocols(hops):
                intra = max((self._hop_us(h, protocol) for h in chain), default=0.0)
                latency = p.base_us[protocol] + 2 * (
                    (per_node - 1) * intra + math.ceil(math.log2(nodes)) * self._hop_us(NETWORK, protocol, "tree")
                )
                yield "tree", protocol, latency + 2 * size / self._bandwidth(protocol, TREE_BANDWIDTH * gbs)
        nv = self.cluster.nvlink
        if name == "allreduce" and nodes == 1 and nv is not None and nv.nvls and set(ring) == {NVSWITCH}:
            yield "nvls", "simple", p.nvls_us + size / self._bandwidth("simple", self._link_gbs(NVSWITCH))

    def _alltoall(self, size: np.ndarray, ranks: int, nodes: int, ring: list[str]) -> np.ndarray:
        """Every rank sends S / n to each peer at once: local peers over the node's slowest link, remote peers
        over the node's network shared by its GPUs; the slower part sets the time."""
        p = self.params
        local = -(-ranks // nodes)
        links = set(ring) or {self.cluster.link_between(0, 0)}
        slowest = min(links, key=self._link_gbs)
        latency = p.base_us["simple"] + self._hop_us(NETWORK if nodes > 1 else slowest, "simple")
        intra_time = size * (local - 1) / ranks / (self._link_gbs(slowest) * p.p2p_gain * 1e3)
        inter_time = size * (ranks - local) / ranks / (self._network.ring_gbs(local) * p.p2p_gain * 1e3 / local)
        return latency + np.maximum(intra_time, inter_time)
