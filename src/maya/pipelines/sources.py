"""Raw measurements as partitions and the files of each. Kernel profiles, by (hardware, campaign):

- campaigns of `maya profile kernels`, published as `<profiles>/<hardware>/<campaign>/`: their
  `measurements/part-*.parquet` files (one row per kernel config);
- NeuSight's training split: one partition per GPU, campaign `neusight-train`, all reading
  `data/neusight/kernels_train.parquet`;
- Vidur's compute profiles: one partition per GPU, campaign `vidur-compute`, all reading
  `data/vidur/compute.parquet`.

Collective measurements, by (network, campaign): Vidur's, one partition per network, campaign
`vidur-collectives`, all reading `data/vidur/collectives.parquet`.

Public kernel measurements, by source: each file of `data/kernels_public/` (`PUBLIC_KERNEL_SOURCES`), campaign
`kernels-public`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from maya import __version__
from maya.core import hardware
from maya.estimators.kernels_public_data import FILES as KERNELS_PUBLIC_FILES
from maya.estimators.kernels_public_data import kernels_public_dir
from maya.estimators.neusight_data import FAMILY_OF_OP, neusight_dir

from .resources import DataSources

NEUSIGHT_CAMPAIGN = "neusight-train"
VIDUR_COMPUTE_CAMPAIGN, VIDUR_COLLECTIVES_CAMPAIGN = "vidur-compute", "vidur-collectives"
NEUSIGHT, MEASUREMENTS, VIDUR_COMPUTE, VIDUR_COLLECTIVES = (
    "neusight",
    "measurements",
    "vidur_compute",
    "vidur_collectives",
)
"""File formats."""
KERNELS_PUBLIC, KERNELS_PUBLIC_CAMPAIGN = "kernels_public", "kernels-public"
PUBLIC_KERNEL_SOURCES: dict[str, str] = {Path(f).stem.replace("_", "-"): f for f in KERNELS_PUBLIC_FILES}
"""Partition key (the file's name) -> the shipped file, relative to `kernels_public_dir()`."""


@dataclass(frozen=True, order=True)
class Partition:
    hardware: str
    campaign: str


@dataclass(frozen=True, order=True)
class NetworkPartition:
    network: str
    campaign: str


@dataclass(frozen=True)
class ProfileFile:
    path: Path
    format: str


def neusight_train() -> Path:
    return neusight_dir() / "kernels_train.parquet"


def vidur_compute(sources: DataSources) -> Path:
    return sources.vidur_files / "compute.parquet"


def vidur_collectives(sources: DataSources) -> Path:
    return sources.vidur_files / "collectives.parquet"


def catalog_name(device: str) -> str:
    """The hardware catalog's name of a GPU (its reported name, slugged, when not in the catalog; "" for a
    missing name)."""
    if not isinstance(device, str):
        return ""
    try:
        return hardware.get(device).name
    except (hardware.UnknownHardware, hardware.HardwareFileError):
        return "-".join(device.lower().split())


def find_partitions(sources: DataSources) -> list[Partition]:
    """Every partition the sources hold now."""
    found = {
        Partition(d.parent.parent.name, d.parent.name)
        for d in sources.profiles.glob("*/*/measurements")
        if d.is_dir() and not any(p.startswith(".") for p in d.parts[-3:-1])
    }
    if sources.neusight:
        table = pq.read_table(neusight_train(), columns=["op", "device"]).to_pandas()
        devices = table.loc[table["op"].isin(list(FAMILY_OF_OP)), "device"].unique()
        found.update(Partition(catalog_name(d), NEUSIGHT_CAMPAIGN) for d in devices)
    if sources.vidur:
        devices = pq.read_table(vidur_compute(sources), columns=["device"]).column("device").unique().to_pylist()
        found.update(Partition(catalog_name(str(d)), VIDUR_COMPUTE_CAMPAIGN) for d in devices)
    return sorted(found)


def find_network_partitions(sources: DataSources) -> list[NetworkPartition]:
    """Every collective-measurement partition the sources hold now."""
    if not sources.vidur:
        return []
    networks = pq.read_table(vidur_collectives(sources), columns=["network"]).column("network").unique().to_pylist()
    return sorted(NetworkPartition(str(n), VIDUR_COLLECTIVES_CAMPAIGN) for n in networks)


def network_files(sources: DataSources, partition: NetworkPartition) -> list[ProfileFile]:
    if partition.campaign == VIDUR_COLLECTIVES_CAMPAIGN and sources.vidur:
        return [ProfileFile(vidur_collectives(sources), VIDUR_COLLECTIVES)]
    return []


def partition_files(sources: DataSources, partition: Partition) -> list[ProfileFile]:
    if partition.campaign == NEUSIGHT_CAMPAIGN and sources.neusight:
        return [ProfileFile(neusight_train(), NEUSIGHT)]
    if partition.campaign == VIDUR_COMPUTE_CAMPAIGN and sources.vidur:
        return [ProfileFile(vidur_compute(sources), VIDUR_COMPUTE)]
    parts = sources.profiles / partition.hardware / partition.campaign / "measurements"
    return [ProfileFile(p, MEASUREMENTS) for p in sorted(parts.glob("part-*.parquet"))]


def fingerprint(files: list[ProfileFile]) -> str:
    """Cheap change detection (names, sizes, modification times) for the sensor."""
    stats = [(str(f.path), f.path.stat().st_size, f.path.stat().st_mtime_ns) for f in files]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]


def content_hash(digests: list[tuple[str, str]]) -> str:
    """Hash of a partition's (path, SHA-256) pairs and of the Maya version that reads them."""
    return hashlib.sha256(json.dumps([__version__, sorted(digests)]).encode()).hexdigest()


def public_kernel_files(source: str) -> list[ProfileFile]:
    """The shipped file of a public kernel-measurement partition."""
    return [ProfileFile(kernels_public_dir() / PUBLIC_KERNEL_SOURCES[source], KERNELS_PUBLIC)]
