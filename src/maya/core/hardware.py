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


class HardwareSpecError(ValueError):
    """A hardware catalog that is malformed: names the device and the field."""


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Hardware]:
    path = data_dir() / "hardware" / "catalog.json"
    try:
        return parse_catalog(json.loads(path.read_bytes()))
    except (ValueError, RecursionError) as e:  # HardwareSpecError, JSONDecodeError, UnicodeDecodeError
        raise HardwareSpecError(f"{path}: {e}") from None


_TEXT = ("name", "device_name", "source")
_COUNTS = ("sm_major", "sm_count", "memory_bytes", "memory_bus_width_bits", "memory_clock_mhz", "l2_bytes",
           "boost_clock_mhz", "shared_mem_per_sm_bytes", "shared_mem_per_block_optin_bytes", "max_threads_per_sm",
           "registers_per_sm")
_RATES = ("memory_bandwidth_gbs", "pcie_gbs", "tdp_w")


def parse_catalog(raw: dict) -> dict[str, Hardware]:
    """The devices of a catalog document (`{"devices": [...]}`) by name. Every field of `Hardware` must be given
    with its type: names as text, counts as positive integers (`sm_minor` may be 0), rates (`nvlink_gbs` may be
    0: no NVLink) and every
    `peak_tflops` as positive numbers up to `MAX_RATE`, `fp32` among them. Raises `HardwareSpecError` naming the device
    and the field."""
    devices = raw.get("devices") if isinstance(raw, dict) else None
    if not isinstance(devices, list):
        raise HardwareSpecError("a hardware catalog is an object with a `devices` list")
    catalog: dict[str, Hardware] = {}
    fields = set(Hardware.__dataclass_fields__)
    for i, d in enumerate(devices):
        where = f"devices[{i}]" + (f" ({d['name']!r:.40})" if isinstance(d, dict) and "name" in d else "")
        if not isinstance(d, dict) or set(d) != fields:
            given = set(d) if isinstance(d, dict) else set()
            raise HardwareSpecError(f"{where}: give exactly the fields {sorted(fields)} (missing "
                                    f"{sorted(fields - given)}, unknown {sorted(map(str, given - fields))})")
        bad = ([f for f in _TEXT if not isinstance(d[f], str) or not d[f]]
               + [f for f in _COUNTS if not _positive(d[f], integer=True)]
               + [f for f in _RATES if not _positive(d[f])]
               + ([] if _is_int(d["sm_minor"]) and d["sm_minor"] >= 0 else ["sm_minor"])
               + ([] if _positive(d["nvlink_gbs"]) or _is_int(d["nvlink_gbs"]) and d["nvlink_gbs"] == 0
                  else ["nvlink_gbs"]))
        peaks = d["peak_tflops"]
        if not (isinstance(peaks, dict) and "fp32" in peaks
                and all(isinstance(k, str) and _positive(v) for k, v in peaks.items())):
            bad.append("peak_tflops")
        if bad:
            raise HardwareSpecError(f"{where}: {', '.join(repr(f) for f in bad)} must be "
                                    f"non-empty text, positive integers or positive numbers up to {MAX_RATE:g} (see Hardware)")
        if d["name"] in catalog:
            raise HardwareSpecError(f"{where}: the name {d['name']!r} is given twice")
        catalog[d["name"]] = Hardware(**d)
    return catalog


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


MAX_RATE = 1e9
"""Bound of rates (GB/s, W) and peaks (TFLOP/s): far beyond any GPU, low enough that products stay finite."""


def _positive(v, integer: bool = False) -> bool:
    if integer:
        return _is_int(v) and 0 < v < 2**63
    return (_is_int(v) or isinstance(v, float)) and 0 < v <= MAX_RATE


def names() -> list[str]:
    return sorted(_catalog())


def get(name: str) -> Hardware:
    """By catalog name (`h100-sxm`) or by the name the device reports (`NVIDIA H100 80GB HBM3`)."""
    if not isinstance(name, str):
        raise UnknownHardware(name)
    catalog = _catalog()
    if name in catalog:
        return catalog[name]
    for hw in catalog.values():
        if hw.device_name.lower() == name.lower():
            return hw
    raise UnknownHardware(name)
