"""The hardware catalog: complete, consistent, and addressable by catalog or device name."""

import json
import re

import pandas as pd
import pytest

from maya.core import hardware
from maya.core.paths import data_dir

REQUIRED = {
    "h100-sxm",
    "h100-pcie",
    "h200",
    "a100-sxm-80gb",
    "a100-sxm-40gb",
    "a100-pcie-80gb",
    "a100-pcie-40gb",
    "v100-sxm-32gb",
    "l4",
    "b200",
}


def test_catalog_covers_required_gpus_with_sources():
    raw = json.loads((data_dir() / "hardware" / "catalog.json").read_text())
    assert REQUIRED <= set(hardware.names())
    for hw in (hardware.get(d["name"]) for d in raw["devices"]):
        assert hw.source in raw["sources"]
        assert hw.sm_count > 0 and hw.memory_bytes > 2**30 and hw.memory_bandwidth_gbs > 0
        assert hw.peak_tflops["fp32"] > 0
        # tensor-core peaks are above the fp32 peak wherever the GPU has them
        assert all(v >= hw.peak_tflops["fp32"] for k, v in hw.peak_tflops.items() if k in ("tf32", "bf16", "fp16"))


def test_lookup_by_device_name_and_unknown():
    assert hardware.get("NVIDIA A100 80GB PCIe").name == "a100-pcie-80gb"
    assert hardware.get("h100-sxm").peak_flops("bf16") == pytest.approx(989.4e12)
    assert hardware.get("v100-sxm-32gb").peak_flops("bf16") == pytest.approx(15.7e12)  # no bf16 units
    with pytest.raises(KeyError, match=r"unknown hardware 'h300'; known: a10, a100.*or the path of a \.json/\.yaml"):
        hardware.get("h300")


RENTED = {
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "a800-sxm-80gb",
    "a10",
    "a40",
    "l4",
    "l40s",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h800",
    "h20",
    "h200",
    "b200",
}


def test_catalog_covers_the_rented_data_centre_parts_and_every_device_in_the_shipped_data():
    assert RENTED <= set(hardware.names())
    for path in ("neusight/kernels_train.parquet", "neusight/kernels_test.parquet", "vidur/compute.parquet"):
        for device in pd.read_parquet(data_dir() / path, columns=["device"])["device"].unique():
            hardware.get(device)  # raises for a device the catalog lacks
    assert hardware.get("NVIDIA A40").name == "a40"
    assert hardware.get("NVIDIA A100-SXM4-80GB").name == "a100-sxm-80gb"
    assert hardware.get("NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert hardware.get("NVIDIA H100 NVL").peak_flops("fp16") == pytest.approx(835.5e12)
    # parts that share a die keep its compute capability and per-SM resources
    assert (hardware.get("h800").sm_major, hardware.get("a40").sm_minor, hardware.get("l40s").sm_minor) == (9, 6, 9)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_part_of_ones_own_from_a_yaml_file_based_on_a_catalog_part(tmp_path):
    path = _write(
        tmp_path,
        "h100-96.yaml",
        "name: h100-96gb-hbm2e\nbased_on: h100-sxm\nmemory_gb: 96\n"
        "memory_bandwidth_gbs: 2400\ntdp_w: 500\npeak_tflops: {fp8: 1500}\n",
    )
    hw = hardware.get(path)
    h100 = hardware.get("h100-sxm")
    assert (hw.name, hw.memory_bytes, hw.memory_bandwidth_gbs, hw.tdp_w) == ("h100-96gb-hbm2e", 96e9, 2400, 500)
    assert (hw.sm_count, hw.peak_flops("bf16"), hw.peak_flops("fp8")) == (
        h100.sm_count,
        h100.peak_flops("bf16"),
        1.5e15,
    )
    assert hardware.get("h100-96gb-hbm2e") == hw and "h100-96gb-hbm2e" in hardware.names()  # known by name now


def test_a_part_of_ones_own_from_a_json_file_with_every_field(tmp_path):
    path = _write(
        tmp_path,
        "x.json",
        json.dumps(
            {
                "name": "x1000",
                "sm_major": 8,
                "sm_minor": 0,
                "sm_count": 100,
                "memory_bytes": 4e10,
                "memory_bandwidth_gbs": 1500,
                "memory_bus_width_bits": 5120,
                "memory_clock_mhz": 1200,
                "l2_bytes": 4e7,
                "boost_clock_mhz": 1400,
                "tdp_w": 300,
                "peak_tflops": {"fp32": 19.5, "bf16": 300},
            }
        ),
    )
    hw = hardware.get(path)
    a100 = hardware.get("a100-sxm-80gb")
    assert (hw.device_name, hw.nvlink_gbs, hw.memory_bytes) == ("x1000", 0.0, 40_000_000_000)
    assert hw.shared_mem_per_sm_bytes == a100.shared_mem_per_sm_bytes  # from the compute capability
    assert "x.json" in hw.source


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: a\nsm_major: 9\nsm_minor: 0\n", "missing field(s) sm_count, memory_bytes"),
        ("name: a\nbased_on: h100-sxm\nsm_count: -4\n", "sm_count must be positive, got -4"),
        ("name: a\nbased_on: h100-sxm\nsm_count: many\n", "sm_count must be a number, got 'many'"),
        ("name: a\nbased_on: h100-sxm\nsm_count: 10.5\n", "sm_count must be a whole number"),
        ("name: a\nbased_on: h100-sxm\nmemory: 80\n", "unknown field(s) memory; known: name"),
        ("name: a\nbased_on: h100-sxm\npeak_tflops: {fp17: 3}\n", "peak_tflops has unknown dtype(s) fp17"),
        ("name: a\nbased_on: h300\n", "based_on 'h300' is not a catalog part"),
        ("name: h100-sxm\nbased_on: h100-sxm\n", "name 'h100-sxm' is a catalog part"),
        ("- just\n- a list\n", "expected a mapping of fields"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_hardware_file_gets_an_error_naming_the_problem(tmp_path, text, message):
    with pytest.raises(hardware.HardwareFileError, match=re.escape(message)):
        hardware.get(_write(tmp_path, "part.yaml", text))


def test_a_missing_hardware_file_is_a_clear_error(tmp_path):
    with pytest.raises(hardware.HardwareFileError, match="cannot read the hardware file"):
        hardware.get(str(tmp_path / "absent.yaml"))


def test_estimators_price_calls_on_a_part_of_ones_own(tmp_path):
    from maya.estimators import KernelEstimator

    hardware.get(
        _write(tmp_path, "slow.yaml", "name: h100-slow-memory\nbased_on: h100-sxm\nmemory_bandwidth_gbs: 1675\n")
    )
    calls = {"family": ["elementwise"], "op": ["add"], "dtype": ["bf16"], "numel": [2.0**28], "operands": [2.0]}
    fast, slow = (
        KernelEstimator().predict(pd.DataFrame({"hardware": [name], **calls}))["roofline_ns"].iloc[0]
        for name in ("h100-sxm", "h100-slow-memory")
    )
    assert slow == pytest.approx(2 * fast)  # a bandwidth-bound call at half the bandwidth
