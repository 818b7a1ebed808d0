"""The hardware catalog: complete, consistent, and addressable by catalog or device name."""
import json

import pytest

from maya.core import hardware
from maya.core.paths import data_dir

REQUIRED = {"h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb",
            "a100-pcie-40gb", "v100-sxm-32gb", "l4", "b200"}


def test_catalog_covers_required_gpus_with_sources():
    raw = json.loads((data_dir() / "hardware" / "catalog.json").read_text())
    assert REQUIRED <= set(hardware.names())
    for hw in map(hardware.get, hardware.names()):
        assert hw.source in raw["sources"]
        assert hw.sm_count > 0 and hw.memory_bytes > 2**30 and hw.memory_bandwidth_gbs > 0
        assert hw.peak_tflops["fp32"] > 0
        # tensor-core peaks are above the fp32 peak wherever the GPU has them
        assert all(v >= hw.peak_tflops["fp32"] for k, v in hw.peak_tflops.items() if k in ("tf32", "bf16", "fp16"))


def test_lookup_by_device_name_and_unknown():
    assert hardware.get("NVIDIA A100 80GB PCIe").name == "a100-pcie-80gb"
    assert hardware.get("h100-sxm").peak_flops("bf16") == pytest.approx(989.4e12)
    assert hardware.get("v100-sxm-32gb").peak_flops("bf16") == pytest.approx(15.7e12)  # no bf16 units
    with pytest.raises(KeyError, match="unknown hardware 'h300'; known: a100"):
        hardware.get("h300")
