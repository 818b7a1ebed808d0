"""Cluster specs (`data/clusters/<name>.json`): GPUs per node and the two link classes a collective
crosses, each as the bus bandwidth nccl-tests reports for it (sources in `data/clusters/README.md`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .paths import data_dir

INTRA_LINKS = ("nvlink", "pcie")
NETWORK_LINKS = ("infiniband", "roce")


class UnknownCluster(KeyError):
    def __str__(self) -> str:
        return f"unknown cluster {self.args[0]!r}; known: {', '.join(cluster_names())}"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpus_per_node: int
    intra_link: str
    intra_busbw_gbs: float
    """Ring bus bandwidth inside a node (nccl-tests busbw of all-gather, or all-reduce with NCCL_ALGO=RING)."""
    nvls_busbw_gbs: float | None
    """All-reduce bus bandwidth with NVLink SHARP (NVSwitch 3 and later); None without."""
    network_link: str
    nics_per_node: int
    nic_busbw_gbs: float
    """Bus bandwidth one NIC sustains in nccl-tests."""
    hardware: str | None = None
    description: str = ""

    @property
    def network_busbw_gbs(self) -> float:
        """Ring bus bandwidth across nodes: every NIC carries one ring, NVLink the hops in between."""
        return min(self.intra_busbw_gbs, self.nics_per_node * self.nic_busbw_gbs)


def clusters_dir() -> Path:
    return data_dir() / "clusters"


def cluster_names() -> list[str]:
    return sorted(p.stem for p in clusters_dir().glob("*.json"))


def load_cluster(name_or_path: str | Path) -> ClusterSpec:
    """A shipped cluster by name (`dgx-h100`) or a spec file of the same form."""
    path = Path(name_or_path)
    if not path.suffix == ".json":
        path = clusters_dir() / f"{name_or_path}.json"
        if not path.is_file():
            raise UnknownCluster(str(name_or_path))
    raw = json.loads(path.read_text())
    intra, inter = raw["intra_node"], raw["inter_node"]
    if intra["link"] not in INTRA_LINKS or inter["link"] not in NETWORK_LINKS:
        raise ValueError(f"{path}: links must be one of {INTRA_LINKS} inside a node and {NETWORK_LINKS} across")
    return ClusterSpec(name=raw["name"], gpus_per_node=raw["gpus_per_node"], intra_link=intra["link"],
                       intra_busbw_gbs=intra["busbw_gbs"], nvls_busbw_gbs=intra.get("nvls_busbw_gbs"),
                       network_link=inter["link"], nics_per_node=inter["nics_per_node"],
                       nic_busbw_gbs=inter["nic_busbw_gbs"], hardware=raw.get("hardware"),
                       description=raw.get("description", ""))
