"""What NCCL reaches on each kind of link, learned from measured collectives
(`maya.estimators.collective_fit`) and shipped as `data/collectives/nccl.json`.

Bandwidths are shares of a link's spec line rate per direction (`ClusterSpec`), latencies microseconds.
A measured inter-node network its source does not describe has its own figures (`networks`, by name);
`default_network` (their geometric mean) prices clusters whose network is undescribed. A described
network (InfiniBand, RoCE NICs) has no measurements: its NICs are taken to reach the PCIe link's
efficiency (their traffic is PCIe DMA) and the undescribed networks' hop latency."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

from maya.core.paths import data_dir

T = TypeVar("T")

FORMAT = "maya-collective-params/2"
PROTOCOLS = ("LL", "LL128", "simple")
LINKS = ("nvlink", "nvswitch", "pcie", "shm")
FALLBACK = {"nvlink": "nvswitch", "nvswitch": "nvlink", "pcie": "shm", "shm": "pcie"}
"""A link kind no measurement crossed takes the figures of its nearest kind."""


@dataclass(frozen=True)
class LinkParams:
    efficiency: float
    """Ring bus bandwidth with the Simple protocol over the link's spec line rate per direction."""
    hop_us: float
    """Latency of one ring step across the link with the Simple protocol (NCCL's tuning model, not fitted)."""


@dataclass(frozen=True)
class NetworkParams:
    """An inter-node network measured without a description: what a ring reaches across it."""

    gpu_gbs: float
    """Bus bandwidth each GPU of a node adds (one NIC or network path per GPU)."""
    node_gbs: float
    """Bus bandwidth a node reaches at most."""
    hop_us: float


@dataclass(frozen=True)
class CollectiveParams:
    links: dict[str, LinkParams]
    base_us: dict[str, float]
    """Fixed cost of a collective per protocol (NCCL's tuning model, not fitted)."""
    hop_ratio: dict[str, float]
    """Per-hop latency of each protocol relative to Simple's (NCCL's tuning model, not fitted)."""
    bandwidth_ratio: dict[str, float]
    """Bandwidth of each protocol relative to Simple's (LL: flags in every 8 bytes; LL128: in every 128)."""
    p2p_gain: float
    """Send/recv bandwidth relative to a ring's on the same link (one direction, no reduction)."""
    nvls_us: float
    """Latency of an NVLS (in-switch reduction) all-reduce inside a node (NCCL's tuning model, not fitted)."""
    networks: dict[str, NetworkParams]
    default_network: NetworkParams
    provenance: dict = field(default_factory=dict, compare=False)
    """Training data (source, SHA-256, rows, networks) and fit figures; not used to price."""

    @property
    def digest(self) -> str:
        """SHA-256 of the figures that price (provenance left out): names the fitted version."""
        body = {k: v for k, v in asdict(self).items() if k != "provenance"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, raw: dict) -> CollectiveParams:
        if raw.get("format") != FORMAT:
            raise ValueError(f"collective parameters of format {raw.get('format')!r}, expected {FORMAT!r}")
        return cls(
            links={k: LinkParams(**v) for k, v in raw["links"].items()},
            base_us=dict(raw["base_us"]),
            hop_ratio=dict(raw["hop_ratio"]),
            bandwidth_ratio=dict(raw["bandwidth_ratio"]),
            p2p_gain=float(raw["p2p_gain"]),
            nvls_us=float(raw["nvls_us"]),
            networks={k: NetworkParams(**v) for k, v in raw["networks"].items()},
            default_network=NetworkParams(**raw["default_network"]),
            provenance=raw.get("provenance", {}),
        )


def shipped_path() -> Path:
    return data_dir() / "collectives" / "nccl.json"


def read_fitted(path: Path, parse: Callable[[dict], T], what: str) -> T:
    """A fitted collectives file read with `parse`, or a ValueError naming the file, `what` it holds and how to rebuild it."""
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: cannot read {what} ({e}); rebuild them with `python -m maya.estimators.collective_fit`"
        ) from None


@functools.cache
def shipped_params() -> CollectiveParams:
    """The parameters fitted on the shipped measurements (`data/collectives/nccl.json`)."""
    return read_fitted(shipped_path(), CollectiveParams.from_json, "the fitted collective parameters")
