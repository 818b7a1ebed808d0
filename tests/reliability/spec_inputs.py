"""Cluster spec files (`load_cluster`, as `--cluster FILE` reads them) and hardware catalogs (`parse_catalog`):
shipped specs with fields replaced by any JSON value, removed or added, and their bytes flipped or cut. A
spec is refused with a `ClusterSpecError` / `HardwareSpecError` naming the field, or it describes links and
GPUs with positive finite figures that price a collective in a finite positive time."""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface
from reliability.kineto_inputs import json_value

from maya.core.clusters import ClusterSpecError, cluster_names, clusters_dir, load_cluster
from maya.core.hardware import HardwareSpecError, parse_catalog
from maya.core.paths import data_dir

CLUSTER_PATHS = [
    ("name",),
    ("gpus_per_node",),
    ("pcie",),
    ("pcie", "generation"),
    ("pcie", "lanes"),
    ("nvlink",),
    ("nvlink", "fabric"),
    ("nvlink", "bidirectional_gbs"),
    ("nvlink", "groups"),
    ("nvlink", "nvls"),
    ("network",),
    ("network", "link"),
    ("network", "nics_per_node"),
    ("network", "nic_gbps"),
    ("p2p",),
    ("hardware",),
    ("measured_as",),
    ("description",),
    ("intra_node",),
    ("extra",),
]
HARDWARE_FIELDS = [
    "name",
    "device_name",
    "sm_major",
    "sm_minor",
    "sm_count",
    "memory_bytes",
    "memory_bandwidth_gbs",
    "l2_bytes",
    "peak_tflops",
    "nvlink_gbs",
    "pcie_gbs",
    "tdp_w",
    "source",
    "extra",
]
numbers = st.one_of(
    st.integers(-3, 17),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=True),
    st.sampled_from([0, 0.0, 1e-300, 1e300, 4, 8, 16, "8", True, None]),
)
anything = st.one_of(numbers, json_value)


@dataclass(frozen=True)
class SpecInput:
    base: int
    edits: tuple[tuple[Any, Any, bool], ...]
    """(path or field, new value, delete)."""
    raw: tuple[tuple[int, int], ...] = ()
    cut: float = 1.0


def _set(doc: Any, path: tuple, value: Any, delete: bool) -> None:
    for key in path[:-1]:
        if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
            return
        doc = doc[key]
    if isinstance(doc, dict):
        if delete:
            doc.pop(path[-1], None)
        else:
            doc[path[-1]] = value


cluster_inputs = st.builds(
    SpecInput,
    st.integers(0, 99),
    st.lists(st.tuples(st.sampled_from(CLUSTER_PATHS), anything, st.booleans()), max_size=3).map(tuple),
    st.one_of(
        st.just(()), st.just(()), st.lists(st.tuples(st.integers(0, 999), st.integers(0, 255)), max_size=2).map(tuple)
    ),
    st.one_of(st.just(1.0), st.just(1.0), st.just(1.0), st.floats(0, 1)),
)


def check_cluster(x: SpecInput) -> None:
    from maya.estimators import CollectiveModel

    names = cluster_names()
    doc = json.loads((clusters_dir() / f"{names[x.base % len(names)]}.json").read_text())
    for path, value, delete in x.edits:
        _set(doc, path, value, delete)
    data = bytearray(json.dumps(doc).encode())
    data = data[: int(len(data) * x.cut)]
    for pos, byte in x.raw:
        if data:
            data[pos % len(data)] = byte
    with tempfile.TemporaryDirectory(prefix="maya-fuzz-cluster-") as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_bytes(bytes(data))
        spec = load_cluster(path)
    figures = (
        [spec.pcie_gbs]
        + ([spec.nvlink.gbs] if spec.nvlink else [])
        + ([spec.network.nic_gbs, spec.network.nics_per_node] if spec.network else [])
    )
    if not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in figures):
        raise Corrupt(f"a spec with figures {figures}")
    if not isinstance(spec.gpus_per_node, int) or spec.gpus_per_node < 1 or not isinstance(spec.p2p, bool):
        raise Corrupt(f"gpus_per_node {spec.gpus_per_node!r}, p2p {spec.p2p!r}")
    spec.summary()
    spec.ring(range(min(spec.gpus_per_node, 64)))
    ranks = min(2 * spec.gpus_per_node, 64)
    seconds = (
        CollectiveModel(spec)
        .time("allreduce", 1 << 26, ranks=ranks, nodes=max(1, -(-ranks // spec.gpus_per_node)))
        .seconds
    )
    if not all(math.isfinite(s) and s > 0 for s in seconds):
        raise Corrupt(f"an allreduce priced at {list(seconds)} s")


catalog_inputs = st.builds(
    SpecInput,
    st.integers(0, 99),
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from(HARDWARE_FIELDS),
                st.just("peak_tflops.fp32"),
                st.just("peak_tflops.bf16"),
                st.just("devices"),
            ),
            anything,
            st.booleans(),
        ),
        max_size=3,
    ).map(tuple),
    st.one_of(
        st.just(()), st.just(()), st.lists(st.tuples(st.integers(0, 4999), st.integers(0, 255)), max_size=2).map(tuple)
    ),
    st.one_of(st.just(1.0), st.just(1.0), st.floats(0, 1)),
)


def check_catalog(x: SpecInput) -> None:
    doc = json.loads((data_dir() / "hardware" / "catalog.json").read_text())
    device = doc["devices"][x.base % len(doc["devices"])]
    for field, value, delete in x.edits:
        if field == "devices":
            _set(doc, ("devices",), value, delete)
        else:
            _set(device, tuple(field.split(".")), value, delete)
    data = bytearray(json.dumps(doc).encode())[: None if x.cut == 1.0 else int(len(json.dumps(doc)) * x.cut)]
    for pos, byte in x.raw:
        if data:
            data[pos % len(data)] = byte
    try:
        raw = json.loads(bytes(data))
    except ValueError:
        return  # not JSON: the loader's refusal, tested by the cluster surface's reader
    catalog = parse_catalog(raw)
    for hw in catalog.values():
        figures = [
            hw.memory_bytes,
            hw.memory_bandwidth,
            hw.sm_count,
            hw.peak_flops("fp32"),
            hw.peak_flops("bf16"),
            hw.l2_bytes,
            hw.pcie_gbs,
        ]
        if not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in figures):
            raise Corrupt(f"{hw.name}: figures {figures}")


def surfaces() -> list[Surface]:
    from maya.estimators import CollectiveModel  # imported outside the inputs' time limit

    CollectiveModel(load_cluster(cluster_names()[0]))
    return [
        Surface("cluster spec", cluster_inputs, check_cluster, errors=(ClusterSpecError,)),
        Surface("hardware catalog", catalog_inputs, check_catalog, errors=(HardwareSpecError,)),
    ]
