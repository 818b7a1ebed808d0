"""`DurationProvider`s backed by `maya.estimators`: `CollectiveDurations` (the NCCL collective model of a
cluster of the target hardware) and `EstimatorDurations` (a registered kernel estimator version, those
collectives and the host-overhead model). Calls the estimators cannot price (unknown work, collectives they
do not model, no cluster for the hardware) fall back to `RooflineDurations`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from ..opcodes import COLL, DEVICE_OPS
from . import DurationProvider, RooflineDurations

if TYPE_CHECKING:
    from maya.estimators import ClusterSpec, KernelEstimator

CALL_FRAME_COLUMNS = ("family", "op", "dtype", "batch", "m", "n", "k", "numel", "row", "operands", "flops")
UNRESOLVED_NOTE_SHARE = 0.1
"""Share of the learned kernel time in kernels shorter than the measurements can resolve above which the
prediction says so."""


class EstimatorsUnavailable(RuntimeError):
    """maya.estimators cannot be imported or has no usable version."""


def cluster_spec(name: str | None, hardware: Hardware | None) -> ClusterSpec | None:
    """The named cluster spec (shipped name or file; unknown: ValueError), else the first shipped cluster
    of `hardware`, else None; holding `hardware` (`ClusterSpec.on_gpu`: a measured machine's curves do not price
    another GPU)."""
    from maya.core.clusters import UnknownCluster, cluster_names, load_cluster

    if name is not None:
        try:
            spec = load_cluster(name)
        except UnknownCluster as e:
            raise ValueError(str(e)) from None
        return spec.on_gpu(hardware) if hardware is not None else spec
    if hardware is None:
        return None
    return next((spec for spec in map(load_cluster, cluster_names()) if spec.hardware == hardware.name), None)


class CollectiveDurations(DurationProvider):
    """Collectives by `CollectiveModel` on a cluster of the target hardware (`cluster`: a shipped name or a
    spec file; default the first shipped cluster of the hardware), else by the roofline's alpha-beta model;
    every other call by the roofline. Needs no trained version."""

    collective_includes_wait = False

    def __init__(self, cluster: str | None = None, fallback: RooflineDurations | None = None):
        if cluster is not None:
            cluster_spec(cluster, None)  # an unknown name fails here, before anything is priced
        self.cluster = cluster
        self.fallback = fallback or RooflineDurations()
        self.name = f"collective model ({cluster})" if cluster else "collective model"
        self._notes: list[str] = []
        self._models: dict[str, object] = {}

    @property
    def notes(self) -> list[str]:
        """The fallbacks taken so far (no cluster spec, communicators packed onto the cluster's nodes)."""
        return list(self._notes)

    def _model(self, hardware: Hardware):
        """The collective model of the named cluster, else of the first shipped cluster of this hardware."""
        from maya.estimators import CollectiveModel

        if hardware.name not in self._models:
            chosen = cluster_spec(self.cluster, hardware)
            self._models[hardware.name] = CollectiveModel(chosen) if chosen else None
        return self._models[hardware.name]

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        out = self.fallback.device_ns(calls, hardware)
        coll = calls["opcode"].to_numpy() == COLL
        model = self._model(hardware) if coll.any() else None
        if model is not None:
            from maya.estimators.collectives import priced_name

            c = calls.loc[coll]
            name = c["collective"].astype(str).map(priced_name)
            # a send to the rank itself is a copy on its GPU, priced by the fallback (`self_copy_ns`)
            own = (name == "sendrecv") & (c["comm_size"] == 1)
            known = (name.notna() & ~own).to_numpy()
            gpus = c["comm_gpus"] if "comm_gpus" in c else pd.Series([()] * len(c), index=c.index, dtype=object)
            frame = pd.DataFrame(
                {
                    "collective": name,
                    "bytes": c["comm_bytes"].fillna(0.0),
                    "ranks": c["comm_size"].fillna(1).astype(int),
                    "nodes": c["comm_nodes"].fillna(1).astype(int),
                    "gpus": gpus.map(lambda g: tuple(g) if isinstance(g, (tuple, list)) else ()),
                }
            )[known]
            if len(frame):
                rows = np.flatnonzero(coll)[known]
                out[rows] = model.predict(self._on_cluster(frame, model.cluster))["duration_ns"].to_numpy(
                    dtype="float64"
                )
        elif coll.any():
            note = f"no cluster spec for {hardware.name}: collectives priced by the roofline alpha-beta model"
            if note not in self._notes:
                self._notes.append(note)
        return out

    def _on_cluster(self, frame: pd.DataFrame, cluster: ClusterSpec) -> pd.DataFrame:
        """Communicators laid out on more GPUs per node than the cluster's nodes have are priced packed on
        its nodes (and the prediction says so)."""
        per_node = -(-frame["ranks"] // frame["nodes"].clip(lower=1))
        beyond = (
            frame["gpus"].map(lambda g: any(i >= cluster.gpus_per_node for i in g))
            | ((per_node > cluster.gpus_per_node) & (frame["collective"] != "sendrecv"))
        ).to_numpy(dtype=bool)
        if not beyond.any():
            return frame
        note = (
            f"communicators laid out on more than the {cluster.gpus_per_node} GPUs per node of cluster "
            f"{cluster.name} are priced packed on its nodes"
        )
        if note not in self._notes:
            self._notes.append(note)
        frame = frame.copy()
        frame.loc[beyond, "nodes"] = -(-frame.loc[beyond, "ranks"] // cluster.gpus_per_node)
        frame.loc[beyond, "gpus"] = pd.Series([()] * int(beyond.sum()), index=frame.index[beyond], dtype=object)
        return frame

    def host_ns(self, calls: pd.DataFrame) -> np.ndarray:
        return self.fallback.host_ns(calls)


class EstimatorDurations(DurationProvider):
    """Kernels by a registered `KernelEstimator` version, collectives by `CollectiveDurations` (the NCCL model
    on `cluster`), host time by `HostOverheadModel`. The kernel measurements are short-loop timings: burst
    clocks."""

    collective_includes_wait = False
    prices_burst_kernels = True

    def __init__(
        self,
        version: str = "latest",
        *,
        cluster: str | None = None,
        warehouse: str | Path | None = None,
        fallback: RooflineDurations | None = None,
    ):
        try:
            from maya import estimators
        except ImportError as e:
            raise EstimatorsUnavailable(f"estimators not available: {e}") from None
        try:
            registry = estimators.Registry(warehouse)
            record = registry.get(version)
            self.kernels = registry.load(record)
        except estimators.RegistryError as e:
            raise EstimatorsUnavailable(f"estimators not available: {e}") from None
        self.version = record.version
        self.name = f"estimators {record.version}"
        self.collectives = CollectiveDurations(cluster, fallback)
        self.host = estimators.HostOverheadModel()
        self._learned_ns = self._unresolved_ns = self._fp8_ns = 0.0
        self._fp8_calls = 0

    @property
    def kernel_estimator(self) -> KernelEstimator:
        return self.kernels

    @property
    def notes(self) -> list[str]:
        from maya.estimators.launch_floor import POST_LAUNCH_S

        notes = list(self.collectives.notes)
        if self._learned_ns and self._unresolved_ns >= UNRESOLVED_NOTE_SHARE * self._learned_ns:
            notes.append(
                f"{self._unresolved_ns / self._learned_ns:.0%} of the learned kernel time is in kernels "
                "predicted shorter than the measurements their model learned from resolve (calls timed one "
                f"by one: under {POST_LAUNCH_S * 1e6:.0f} us; device-timed: under the shortest measured): "
                "their device time is bounded, not fitted"
            )
        if self._fp8_calls:
            notes.append(
                f"{self._fp8_calls} fp8 GEMM calls ({self._fp8_ns / 1e6:.2f} ms) are priced on the GPU's fp8 "
                "tensor-core peak with the efficiency the tensor-core GEMM model learned from fp16/bf16 "
                "measurements: a transfer, since no fp8 GEMM measurement is shipped; their scaling "
                "kernels (amax, scale, cast) are priced as the elementwise and reduction kernels they are"
            )
        return notes

    def device_ns(self, calls: pd.DataFrame, hardware: Hardware) -> np.ndarray:
        out = self.collectives.device_ns(calls, hardware)
        ops = calls["opcode"].to_numpy()
        kernels = np.isin(ops, DEVICE_OPS) & (ops != COLL)
        if kernels.any():
            frame = calls.loc[kernels, list(CALL_FRAME_COLUMNS)].copy()
            frame["family"] = frame["family"].fillna("other")
            frame["bytes"] = calls.loc[kernels, "work_bytes"]
            frame["hardware"] = hardware.name
            priced = self.kernels.predict(frame)
            predicted = priced["duration_ns"].to_numpy(dtype="float64")
            out[kernels] = np.where(np.isfinite(predicted), predicted, out[kernels])
            self._count_unresolved(priced)
            self._count_fp8(frame, priced)
        return out

    def _count_fp8(self, frame: pd.DataFrame, priced: pd.DataFrame) -> None:
        """fp8 GEMMs priced by a learned model: no fp8 measurement trained it (the note says so)."""
        learned = priced["method"].isin(["model", "model_transfer"]).to_numpy()
        fp8 = learned & (frame["family"] == "gemm").to_numpy() & (frame["dtype"] == "fp8").to_numpy()
        self._fp8_calls += int(fp8.sum())
        self._fp8_ns += float(np.nansum(priced["duration_ns"].to_numpy(dtype="float64")[fp8]))

    def _count_unresolved(self, priced: pd.DataFrame) -> None:
        """Add up the learned kernel time, and the part of it in kernels too short for the measurements their
        model learned from (`below_measured`)."""
        duration = priced["duration_ns"].to_numpy(dtype="float64")
        learned = priced["method"].isin(["model", "model_transfer"]).to_numpy() & np.isfinite(duration)
        self._learned_ns += float(duration[learned].sum())
        self._unresolved_ns += float(duration[learned & priced["below_measured"].to_numpy(dtype=bool)].sum())

    def host_ns(self, calls: pd.DataFrame) -> np.ndarray:
        host = self.host.predict(calls["api"].astype(str))
        return np.where((calls["domain"] == "device").to_numpy(), 0.0, host)
