"""Kernel, collective and host-overhead runtime estimators and their versioned registry.

- `KernelEstimator.predict(calls)`: kernel durations for a call frame (`calls`), by lookup of
  measured shapes, learned per-family efficiency models or the analytical roofline;
- `CollectiveModel`: NCCL algorithm and protocol times on a cluster's links (`data/clusters/`), with
  per-link figures fitted to measured NCCL (`CollectiveParams`, `data/collectives/`);
- `HostOverheadModel`: CPU cost per API call;
- `Registry` / `train_version`: versions of trained estimators in the DuckDB warehouse.

The names below are imported on first use (PEP 562): importing a light submodule (`maya.estimators.calls`,
used by the simulator's work model) does not pay for XGBoost, scikit-learn and SciPy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

EXPORTS = {
    "METHODS": ".kernel_estimator",
    "ArtifactError": ".registry",
    "CallFrameError": ".calls",
    "ClusterSpec": "maya.core.clusters",
    "CollectiveModel": ".collectives",
    "CollectiveParams": ".collective_params",
    "HostOverheadModel": ".host_overhead",
    "KernelEstimator": ".kernel_estimator",
    "Registry": ".registry",
    "RegistryError": ".registry",
    "TrainConfig": ".training",
    "UnknownVersion": ".registry",
    "load_cluster": "maya.core.clusters",
    "train": ".training",
    "train_version": ".versioning",
}
"""Each re-exported name and the module it is defined in."""
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(import_module(EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
