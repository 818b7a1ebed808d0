"""Kernel, collective and host-overhead runtime estimators and their versioned registry.

- `KernelEstimator.predict(calls)`: kernel durations for a call frame (`calls`), by lookup of
  measured shapes, learned per-family efficiency models or the analytical roofline;
- `CollectiveModel`: NCCL algorithm and protocol times on a cluster's links (`data/clusters/`), with
  per-link figures fitted to measured NCCL (`CollectiveParams`, `data/collectives/`);
- `HostOverheadModel`: CPU cost per API call;
- `Registry` / `train_version`: versions of trained estimators in the DuckDB warehouse.
"""

from __future__ import annotations

from maya.core.clusters import ClusterSpec, load_cluster

from .calls import CallFrameError
from .collective_params import CollectiveParams
from .collectives import CollectiveModel
from .host_overhead import HostOverheadModel
from .kernel_estimator import METHODS, KernelEstimator
from .registry import ArtifactError, Registry, RegistryError, UnknownVersion
from .training import TrainConfig, train
from .versioning import train_version

__all__ = [
    "METHODS",
    "ArtifactError",
    "CallFrameError",
    "ClusterSpec",
    "CollectiveModel",
    "CollectiveParams",
    "HostOverheadModel",
    "KernelEstimator",
    "Registry",
    "RegistryError",
    "TrainConfig",
    "UnknownVersion",
    "load_cluster",
    "train",
    "train_version",
]
