"""The hardware catalog (`data/hardware/catalog.json`): GPU spec-sheet figures selected by name, and parts
users describe in a file of their own (`load_file`; any `--hardware` option takes such a file's path)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

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


MEMORY_FIELDS = (
    "name",
    "device_name",
    "source",
    "memory_bytes",
    "memory_bandwidth_gbs",
    "memory_bus_width_bits",
    "memory_clock_mhz",
)
"""What two parts of one GPU may differ in (an A100 SXM of 40 and of 80 GB)."""


def same_gpu(a: Hardware, b: Hardware) -> bool:
    """Whether `a` and `b` are one GPU but for their memory: the same chip, clocks, power and links."""
    return all(
        getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(Hardware) if f.name not in MEMORY_FIELDS
    )


class UnknownHardware(KeyError):
    def __str__(self) -> str:
        return (
            f"unknown hardware {self.args[0]!r}; known: {', '.join(names())} (or the path of a .json/.yaml "
            "file describing a part: see data/hardware/README.md)"
        )


class HardwareFileError(ValueError):
    """A user's hardware file that cannot be read or describes no usable part."""


FILE_SUFFIXES = (".json", ".yaml", ".yml")
PEAK_DTYPES = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""The `peak_tflops` keys a part may give (dense TFLOP/s); `fp32` is required."""
CAPABILITY_FIELDS = (
    "shared_mem_per_sm_bytes",
    "shared_mem_per_block_optin_bytes",
    "max_threads_per_sm",
    "registers_per_sm",
)
"""Fixed by the compute capability: a user's part without them takes a catalog part's of the same capability."""
OPTIONAL_DEFAULTS = {"nvlink_gbs": 0.0, "pcie_gbs": 64.0}
FIELDS = {f.name: f for f in dataclasses.fields(Hardware)}
_registered: dict[str, tuple[Path, Hardware]] = {}
"""Parts loaded from users' files in this process, by name."""


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
_COUNTS = (
    "sm_major",
    "sm_count",
    "memory_bytes",
    "memory_bus_width_bits",
    "memory_clock_mhz",
    "l2_bytes",
    "boost_clock_mhz",
    "shared_mem_per_sm_bytes",
    "shared_mem_per_block_optin_bytes",
    "max_threads_per_sm",
    "registers_per_sm",
)
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
            raise HardwareSpecError(
                f"{where}: give exactly the fields {sorted(fields)} (missing "
                f"{sorted(fields - given)}, unknown {sorted(map(str, given - fields))})"
            )
        bad = (
            [f for f in _TEXT if not isinstance(d[f], str) or not d[f]]
            + [f for f in _COUNTS if not _positive(d[f], integer=True)]
            + [f for f in _RATES if not _positive(d[f])]
            + ([] if _is_int(d["sm_minor"]) and d["sm_minor"] >= 0 else ["sm_minor"])
            + (
                []
                if _positive(d["nvlink_gbs"]) or _is_int(d["nvlink_gbs"]) and d["nvlink_gbs"] == 0
                else ["nvlink_gbs"]
            )
        )
        peaks = d["peak_tflops"]
        if not (
            isinstance(peaks, dict)
            and "fp32" in peaks
            and all(isinstance(k, str) and _positive(v) for k, v in peaks.items())
        ):
            bad.append("peak_tflops")
        if bad:
            raise HardwareSpecError(
                f"{where}: {', '.join(repr(f) for f in bad)} must be "
                f"non-empty text, positive integers or positive numbers up to {MAX_RATE:g} (see Hardware)"
            )
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
    """Catalog parts and the parts loaded from files in this process."""
    return sorted({*_catalog(), *_registered})


def is_file_reference(name: str) -> bool:
    """Whether `--hardware` was given a file (by its suffix) rather than a name."""
    return Path(name).suffix.lower() in FILE_SUFFIXES


def get(name: str) -> Hardware:
    """By catalog name (`h100-sxm`), by the name the device reports (`NVIDIA H100 80GB HBM3`), by the name of
    a part loaded from a file in this process, or by the path of such a file (`load_file`)."""
    if not isinstance(name, str):
        raise UnknownHardware(name)
    if is_file_reference(name):
        return load_file(name)
    catalog = _catalog()
    if name in catalog:
        return catalog[name]
    if name in _registered:
        return _registered[name][1]
    for hw in [*catalog.values(), *(hw for _, hw in _registered.values())]:
        if hw.device_name.lower() == name.lower():
            return hw
    raise UnknownHardware(name)


def load_file(path: str | Path) -> Hardware:
    """A part described in a JSON or YAML file, registered under its `name` for this process (so traces and
    estimators that name it resolve). The fields are the catalog's (`data/hardware/catalog.json`); `based_on`
    names a catalog part whose figures the file's replace, `memory_gb` (10^9 bytes) may stand for
    `memory_bytes`. Without `based_on` every field is required except `device_name` (default: the name),
    `source` (default: the file), `nvlink_gbs` (0), `pcie_gbs` (64) and the compute capability's SM resources
    (`CAPABILITY_FIELDS`, from a catalog part of the same capability)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as e:
        raise HardwareFileError(f"{path}: cannot read the hardware file ({e.strerror or e})") from None
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise HardwareFileError(f"{path}: not valid {path.suffix.lstrip('.').upper()} ({e})") from None
    hw = _part(raw, path)
    if hw.name in _catalog():
        raise HardwareFileError(f"{path}: name {hw.name!r} is a catalog part; give your part a name of its own")
    known = _registered.get(hw.name)
    if known is not None and known[0] != path.resolve() and known[1] != hw:
        raise HardwareFileError(f"{path}: name {hw.name!r} was already loaded from {known[0]} with other figures")
    _registered[hw.name] = (path.resolve(), hw)
    return hw


def _part(raw: object, path: Path) -> Hardware:
    if not isinstance(raw, dict):
        raise HardwareFileError(f"{path}: expected a mapping of fields (name, sm_count, ...), got {type(raw).__name__}")
    raw = dict(raw)
    unknown = sorted(set(raw) - set(FIELDS) - {"based_on", "memory_gb"})
    if unknown:
        raise HardwareFileError(
            f"{path}: unknown field(s) {', '.join(unknown)}; known: {', '.join([*FIELDS, 'based_on', 'memory_gb'])}"
        )
    if "memory_gb" in raw:
        if "memory_bytes" in raw:
            raise HardwareFileError(f"{path}: give memory_gb or memory_bytes, not both")
        raw["memory_bytes"] = _number(raw.pop("memory_gb"), "memory_gb", path) * 1e9
    base = raw.pop("based_on", None)
    if base is not None:
        if base not in _catalog():
            raise HardwareFileError(f"{path}: based_on {base!r} is not a catalog part; known: {', '.join(_catalog())}")
        values = dataclasses.asdict(_catalog()[base])
        values["peak_tflops"] = {**values["peak_tflops"], **(raw.pop("peak_tflops", None) or {})}
        values.update(raw, source=raw.get("source", f"user file {path} (based on {base})"))
    else:
        values = {**OPTIONAL_DEFAULTS, "source": f"user file {path}", **raw}
        values.setdefault("device_name", values.get("name"))
        _capability_defaults(values, path)
    missing = [name for name in FIELDS if name not in values]
    if missing:
        raise HardwareFileError(
            f"{path}: missing field(s) {', '.join(missing)} (or name a catalog part to start from with based_on)"
        )
    return Hardware(**{name: _field(name, values[name], path) for name in FIELDS})


def _capability_defaults(values: dict, path: Path) -> None:
    """Fill absent SM resources from a catalog part of the same compute capability."""
    if all(name in values for name in CAPABILITY_FIELDS) or "sm_major" not in values or "sm_minor" not in values:
        return
    capability = (values["sm_major"], values["sm_minor"])
    same = [hw for hw in _catalog().values() if (hw.sm_major, hw.sm_minor) == capability]
    if not same:
        absent = [name for name in CAPABILITY_FIELDS if name not in values]
        raise HardwareFileError(
            f"{path}: no catalog part has compute capability {capability[0]}.{capability[1]} "
            f"to take {', '.join(absent)} from: give them"
        )
    for name in CAPABILITY_FIELDS:
        values.setdefault(name, getattr(same[0], name))


def _field(name: str, value: object, path: Path):
    kind = FIELDS[name].type
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise HardwareFileError(f"{path}: {name} must be a non-empty string, got {value!r}")
        return value
    if kind == "dict[str, float]":
        return _peaks(value, path)
    number = _number(value, name, path)
    if name == "sm_minor" or name in OPTIONAL_DEFAULTS:
        if number < 0:
            raise HardwareFileError(f"{path}: {name} must not be negative, got {value!r}")
    elif number <= 0:
        raise HardwareFileError(f"{path}: {name} must be positive, got {value!r}")
    if kind == "int":
        if number != int(number):
            raise HardwareFileError(f"{path}: {name} must be a whole number, got {value!r}")
        return int(number)
    return float(number)


def _number(value: object, name: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise HardwareFileError(f"{path}: {name} must be a number, got {value!r}")
    return float(value)


def _peaks(value: object, path: Path) -> dict[str, float]:
    if not isinstance(value, dict):
        raise HardwareFileError(f"{path}: peak_tflops must be a mapping of dtype to dense TFLOP/s, got {value!r}")
    unknown = sorted(set(value) - set(PEAK_DTYPES))
    if unknown:
        raise HardwareFileError(
            f"{path}: peak_tflops has unknown dtype(s) {', '.join(map(str, unknown))}; known: {', '.join(PEAK_DTYPES)}"
        )
    if "fp32" not in value:
        raise HardwareFileError(f"{path}: peak_tflops needs at least fp32")
    peaks = {}
    for dtype, tflops in value.items():
        number = _number(tflops, f"peak_tflops.{dtype}", path)
        if number <= 0:
            raise HardwareFileError(f"{path}: peak_tflops.{dtype} must be positive, got {tflops!r}")
        peaks[dtype] = number
    return peaks
