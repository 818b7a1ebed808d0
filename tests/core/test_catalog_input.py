"""Regressions found by fuzzing (tests/reliability): cluster spec files and hardware catalogs that do not
describe real links and GPUs get one `ClusterSpecError` / `HardwareSpecError` naming the field, instead of a
spec with zero or negative bandwidths (priced as such) or another exception."""

import json

import pytest

from maya.core.clusters import ClusterSpecError, load_cluster
from maya.core.hardware import HardwareSpecError, parse_catalog
from maya.core.paths import data_dir

DGX = {
    "name": "x",
    "gpus_per_node": 8,
    "pcie": {"generation": 5, "lanes": 16},
    "nvlink": {"fabric": "nvswitch", "bidirectional_gbs": 900},
    "network": {"link": "infiniband", "nics_per_node": 8, "nic_gbps": 400},
}


def spec_file(tmp_path, doc):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pcie": {"generation": 5, "lanes": 0}}, "pcie.lanes must be between 1 and 32, not 0"),  # PCIe at 0 GB/s
        ({"nvlink": {"fabric": "nvswitch", "bidirectional_gbs": -1478}}, "bidirectional_gbs must be a rate above 0"),
        ({"network": {"link": "roce", "nics_per_node": 0.0, "nic_gbps": 100}}, "nics_per_node must be an integer"),
        ({"network": {"link": "roce", "nics_per_node": 1, "nic_gbps": float("inf")}}, "nic_gbps must be a rate"),
        ({"gpus_per_node": "8"}, "gpus_per_node must be an integer"),
        ({"gpus_per_node": True}, "gpus_per_node must be an integer"),
        ({"gpus_per_node": 10**30}, "gpus_per_node must be between 1 and 4096"),  # OverflowError with inf
        ({"p2p": "false"}, "p2p must be true or false"),  # bool("false") is True
        ({"pcie": [5]}, "pcie must be an object"),
        ({"nvlink": {"fabric": "bridge", "bidirectional_gbs": 100, "groups": [[0, "1"]]}}, "lists of GPU indices"),
        ({"hardware": 7}, "hardware must be a hardware catalog name"),
    ],
)
def test_cluster_specs_refused_with_the_field(tmp_path, change, message):
    with pytest.raises(ClusterSpecError, match=message):
        load_cluster(spec_file(tmp_path, {**DGX, **change}))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[1, 2]", "a JSON object, not list"),  # was AttributeError
        (b'{"name": "\xec"}', "not JSON"),  # was UnicodeDecodeError
        (b"{", "not JSON"),
    ],
)
def test_cluster_files_that_are_not_specs(tmp_path, content, message):
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    with pytest.raises(ClusterSpecError, match=message):
        load_cluster(path)


def test_a_missing_cluster_file_is_a_spec_error(tmp_path):
    """Was a FileNotFoundError, which `maya predict --cluster` does not catch."""
    with pytest.raises(ClusterSpecError, match="cannot be read"):
        load_cluster(tmp_path / "nope.json")


def _catalog():
    return json.loads((data_dir() / "hardware" / "catalog.json").read_text())


def test_the_shipped_catalog_parses():
    assert "h100-sxm" in parse_catalog(_catalog())


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("memory_bandwidth_gbs", 0, "'memory_bandwidth_gbs' must be"),
        ("sm_count", 13.5, "'sm_count' must be"),
        ("peak_tflops", {"bf16": 10}, "'peak_tflops' must be"),  # no fp32 to fall back on: KeyError
        ("peak_tflops", {"fp32": 1e300}, "'peak_tflops' must be"),  # a peak of inf FLOP/s
        ("name", None, "'name' must be"),
    ],
)
def test_catalog_fields_refused_with_the_device(field, value, message):
    doc = _catalog()
    doc["devices"][0][field] = value
    with pytest.raises(HardwareSpecError, match=message):
        parse_catalog(doc)


def test_catalog_devices_need_every_field_once():
    doc = _catalog()
    del doc["devices"][1]["tdp_w"]
    with pytest.raises(HardwareSpecError, match=r"missing \['tdp_w'\]"):
        parse_catalog(doc)
    doc = _catalog()
    doc["devices"].append(doc["devices"][0])
    with pytest.raises(HardwareSpecError, match="given twice"):
        parse_catalog(doc)
