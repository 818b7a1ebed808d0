"""The hardware catalog (`data/hardware/catalog.json`): GPU spec-sheet figures selected by name."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from .paths import data_dir

DEFAULT_HARDWARE = "h100-sxm"
"""The GPU Maya emulates and prices for when none is named."""


@dataclass(frozen=True)
class Hardware:
    name: str
    device_name: str
    sm_major: int
    sm_minor: int
    sm_count: int
    memory_bytes: int
    memory_bandwidth_gbs: float
    memory_bus_width_bits: int
    memory_clock_mhz: int
    l2_bytes: int
    boost_clock_mhz: int
    shared_mem_per_sm_bytes: int
    shared_mem_per_block_optin_bytes: int
    max_threads_per_sm: int
    registers_per_sm: int
    peak_tflops: dict[str, float] = field(hash=False)
    nvlink_gbs: float
    pcie_gbs: float
    tdp_w: float
    source: str

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for `dtype` (`fp32`, `tf32`, `bf16`, ...); fp32 when the GPU lacks it."""
        return self.peak_tflops.get(dtype, self.peak_tflops["fp32"]) * 1e12

    @property
    def memory_bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bandwidth_gbs * 1e9


class UnknownHardware(KeyError):
    def __str__(self) -> str:
        return f"unknown hardware {self.args[0]!r}; known: {', '.join(names())}"


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Hardware]:
    raw = json.loads((data_dir() / "hardware" / "catalog.json").read_text())
    return {d["name"]: Hardware(**d) for d in raw["devices"]}


def names() -> list[str]:
    return sorted(_catalog())


def get(name: str) -> Hardware:
    """By catalog name (`h100-sxm`) or by the name the device reports (`NVIDIA H100 80GB HBM3`)."""
    catalog = _catalog()
    if name in catalog:
        return catalog[name]
    for hw in catalog.values():
        if hw.device_name.lower() == name.lower():
            return hw
    raise UnknownHardware(name)
