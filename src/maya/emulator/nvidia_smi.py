"""`nvidia-smi` for the virtual GPUs: first on an emulated rank's PATH, answering from the NVML stub
(libnvidia-ml.so.1) as the real tool does: the default table, `-L`, `--query-gpu=FIELDS
--format=csv[,noheader][,nounits]` (with `-i`/`--id`), and `topo -m` (every pair of GPUs joined by the
emulated GPU's NVLinks, as on an HGX board). Any other option fails loudly, naming itself.

    python -m maya.emulator.nvidia_smi [ARGS]   (the `nvidia-smi` build.py writes runs this)
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from maya.core import settings

NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3
CLOCK_SM, CLOCK_MEM = 1, 2
MIB = 1 << 20


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Process(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class NvmlError(RuntimeError):
    def __init__(self, function: str, code: int):
        super().__init__(f"{function} failed with NVML error {code}")
        self.code = code


class Nvml:
    """The few NVML calls nvidia-smi makes, through ctypes."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self._call("nvmlInit_v2")

    def _call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != NVML_SUCCESS:
            raise NvmlError(name, code)

    def _text(self, name: str, *args) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call(name, *args, buf, ctypes.c_uint(len(buf)))
        return buf.value.decode()

    def _uint(self, name: str, *args) -> int:
        value = ctypes.c_uint()
        self._call(name, *args, ctypes.byref(value))
        return value.value

    def count(self) -> int:
        return self._uint("nvmlDeviceGetCount_v2")

    def handle(self, index: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h))
        return h

    def driver_version(self) -> str:
        return self._text("nvmlSystemGetDriverVersion")

    def cuda_version(self) -> str:
        v = ctypes.c_int()
        self._call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(v))
        return f"{v.value // 1000}.{v.value % 1000 // 10}"

    def name(self, h) -> str:
        return self._text("nvmlDeviceGetName", h)

    def uuid(self, h) -> str:
        return self._text("nvmlDeviceGetUUID", h)

    def serial(self, h) -> str:
        return self._text("nvmlDeviceGetSerial", h)

    def memory(self, h) -> _Memory:
        m = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(m))
        return m

    def utilization(self, h) -> _Utilization:
        u = _Utilization()
        self._call("nvmlDeviceGetUtilizationRates", h, ctypes.byref(u))
        return u

    def temperature(self, h) -> int:
        return self._uint("nvmlDeviceGetTemperature", h, ctypes.c_int(0))

    def power(self, h) -> int:
        return self._uint("nvmlDeviceGetPowerUsage", h)

    def power_limit(self, h) -> int:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", h)

    def clock(self, h, kind: int, maximum: bool = False) -> int:
        return self._uint("nvmlDeviceGetMaxClockInfo" if maximum else "nvmlDeviceGetClockInfo", h, ctypes.c_int(kind))

    def pstate(self, h) -> int:
        return self._uint("nvmlDeviceGetPerformanceState", h)

    def persistence(self, h) -> bool:
        return bool(self._uint("nvmlDeviceGetPersistenceMode", h))

    def compute_capability(self, h) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call("nvmlDeviceGetCudaComputeCapability", h, ctypes.byref(major), ctypes.byref(minor))
        return f"{major.value}.{minor.value}"

    def fan(self, h) -> int | None:
        try:
            return self._uint("nvmlDeviceGetFanSpeed", h)
        except NvmlError as e:
            if e.code == NVML_ERROR_NOT_SUPPORTED:
                return None
            raise

    def processes(self, h) -> list[_Process]:
        n = ctypes.c_uint(16)
        infos = (_Process * 16)()
        self._call("nvmlDeviceGetComputeRunningProcesses", h, ctypes.byref(n), infos)
        return list(infos[: n.value])


def bus_id(index: int) -> str:
    return f"00000000:{index + 1:02X}:00.0"  # as the stubs say (cudaDeviceGetPCIBusId, NVML)


@dataclass(frozen=True)
class Field:
    unit: str  # shown in the header ("memory.used [MiB]") and after values, unless nounits
    value: Callable[[Nvml, object, int], object]


FIELDS: dict[str, Field] = {
    "index": Field("", lambda n, h, i: i),
    "count": Field("", lambda n, h, i: n.count()),
    "name": Field("", lambda n, h, i: n.name(h)),
    "gpu_name": Field("", lambda n, h, i: n.name(h)),
    "uuid": Field("", lambda n, h, i: n.uuid(h)),
    "gpu_uuid": Field("", lambda n, h, i: n.uuid(h)),
    "serial": Field("", lambda n, h, i: n.serial(h)),
    "pci.bus_id": Field("", lambda n, h, i: bus_id(i)),
    "gpu_bus_id": Field("", lambda n, h, i: bus_id(i)),
    "driver_version": Field("", lambda n, h, i: n.driver_version()),
    "compute_cap": Field("", lambda n, h, i: n.compute_capability(h)),
    "persistence_mode": Field("", lambda n, h, i: "Enabled" if n.persistence(h) else "Disabled"),
    "pstate": Field("", lambda n, h, i: f"P{n.pstate(h)}"),
    "memory.total": Field("MiB", lambda n, h, i: n.memory(h).total // MIB),
    "memory.used": Field("MiB", lambda n, h, i: n.memory(h).used // MIB),
    "memory.free": Field("MiB", lambda n, h, i: n.memory(h).free // MIB),
    "utilization.gpu": Field("%", lambda n, h, i: n.utilization(h).gpu),
    "utilization.memory": Field("%", lambda n, h, i: n.utilization(h).memory),
    "temperature.gpu": Field("", lambda n, h, i: n.temperature(h)),
    "power.draw": Field("W", lambda n, h, i: f"{n.power(h) / 1000:.2f}"),
    "power.limit": Field("W", lambda n, h, i: f"{n.power_limit(h) / 1000:.2f}"),
    "enforced.power.limit": Field("W", lambda n, h, i: f"{n.power_limit(h) / 1000:.2f}"),
    "clocks.sm": Field("MHz", lambda n, h, i: n.clock(h, CLOCK_SM)),
    "clocks.current.sm": Field("MHz", lambda n, h, i: n.clock(h, CLOCK_SM)),
    "clocks.mem": Field("MHz", lambda n, h, i: n.clock(h, CLOCK_MEM)),
    "clocks.max.sm": Field("MHz", lambda n, h, i: n.clock(h, CLOCK_SM, maximum=True)),
    "clocks.max.memory": Field("MHz", lambda n, h, i: n.clock(h, CLOCK_MEM, maximum=True)),
    "fan.speed": Field("%", lambda n, h, i: "[N/A]" if n.fan(h) is None else n.fan(h)),
}


def query(nvml: Nvml, fields: list[str], fmt: set[str], ids: list[int]) -> list[str]:
    units = "nounits" not in fmt
    lines = (
        [] if "noheader" in fmt else [", ".join(f + (f" [{FIELDS[f].unit}]" if FIELDS[f].unit else "") for f in fields)]
    )
    for i in ids:
        h = nvml.handle(i)
        values = []
        for f in fields:
            value, unit = FIELDS[f].value(nvml, h, i), FIELDS[f].unit
            values.append(f"{value}" + (f" {unit}" if units and unit and value != "[N/A]" else ""))
        lines.append(", ".join(values))
    return lines


def listing(nvml: Nvml, ids: list[int]) -> list[str]:
    return [f"GPU {i}: {nvml.name(nvml.handle(i))} (UUID: {nvml.uuid(nvml.handle(i))})" for i in ids]


WIDE = 89  # inside the report's outer bars
BAR = "+-----------------------------------------+------------------------+----------------------+"


def _line(text: str) -> str:
    return f"|{text:<{WIDE}}|"


def table(nvml: Nvml, ids: list[int]) -> list[str]:
    """The default report, laid out as nvidia-smi 580 prints it."""
    driver = nvml.driver_version()
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        "+" + "-" * WIDE + "+",
        _line(f" NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {nvml.cuda_version()}"),
        BAR,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    running = []
    for i in ids:
        h = nvml.handle(i)
        mem, fan = nvml.memory(h), nvml.fan(h)
        power = f"{nvml.power(h) // 1000}W / {nvml.power_limit(h) // 1000:>4}W"
        persistence = "On" if nvml.persistence(h) else "Off"
        lines += [
            f"|{i:>4}  {nvml.name(h)[:28]:<28}{persistence:>5}  |{bus_id(i):>19} Off |{0:>21} |",
            f"|{'N/A' if fan is None else f'{fan}%':>4}{f'{nvml.temperature(h)}C':>6}"
            f"{f'P{nvml.pstate(h)}':>6}{power:>24} |{f'{mem.used // MIB}MiB / {mem.total // MIB:>6}MiB':>23} |"
            f"{f'{nvml.utilization(h).gpu}%':>8}{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            BAR,
        ]
        running += [(i, p) for p in nvml.processes(h)]
    lines += [
        "",
        "+" + "-" * WIDE + "+",
        _line(" Processes:"),
        _line("  GPU   GI   CI              PID   Type   Process name                        GPU Memory"),
        _line("        ID   ID                                                               Usage"),
        "|" + "=" * WIDE + "|",
    ]
    if not running:
        lines.append(_line("  No running processes found"))
    for i, p in running:
        lines.append(
            _line(
                f"{i:>5}   N/A  N/A {p.pid:>16}      C   {_process_name(p.pid)[-35:]:<35}"
                f"{p.usedGpuMemory // MIB:>8}MiB "
            )
        )
    lines.append("+" + "-" * WIDE + "+")
    return lines


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].decode(errors="replace") or "python"
    except OSError:
        return "python"


def nvlinks(config: str) -> tuple[int, bool]:
    """The NVLinks per GPU in the virtual devices' config (`nvlinks=N`, written by the launcher; 0 without) and
    whether they bridge GPUs in pairs (`nvlink_bridged=1`) rather than join every pair."""
    values = {}
    try:
        with open(config) as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                values[key] = value
    except OSError:
        pass
    return int(values.get("nvlinks", 0)), values.get("nvlink_bridged") == "1"


LEGEND = [
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
]


def topology(count: int, links: int, bridged: bool = False) -> list[str]:
    """`nvidia-smi topo -m`: the GPU matrix, every pair joined by `links` NVLinks (an SXM board's NVSwitches), or
    when `bridged` (PCIe cards) only GPUs 2i and 2i+1, the others through the PCIe host bridges of one NUMA node
    (`NODE`, as every pair is when the GPU has no NVLink); the CPUs of this machine."""
    cpus = f"0-{os.cpu_count() - 1}" if (os.cpu_count() or 1) > 1 else "0"
    gpus = [f"GPU{i}" for i in range(count)]
    lines = ["\t" + "\t".join([*gpus, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i in range(count):
        cells = [
            " X " if j == i else f"NV{links}" if links and (not bridged or i // 2 == j // 2) else "NODE"
            for j in range(count)
        ]
        lines.append("\t".join([gpus[i], *cells, cpus, "0", "\tN/A"]))
    return [*lines, "", *LEGEND]


class UsageError(Exception):
    """nvidia-smi's own complaint about its arguments (exit code 2)."""


def _ids(spec: str | None, count: int) -> list[int]:
    if spec is None:
        return list(range(count))
    ids = [int(x) for x in spec.split(",") if x.strip()]
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise UsageError(f"No devices were found with index {bad[0]}")
    return ids


def main(argv: Sequence[str], lib: ctypes.CDLL | None = None) -> int:
    fields: list[str] | None = None
    fmt: set[str] = set()
    spec: str | None = None
    mode = "table"
    args = list(argv)
    try:
        while args:
            arg = args.pop(0)
            if arg in ("-L", "--list-gpus"):
                mode = "list"
            elif arg == "topo" and args and args[0] in ("-m", "--matrix"):
                args.pop(0)
                mode = "topo"
            elif arg.startswith("--query-gpu="):
                fields, mode = [f.strip() for f in arg.split("=", 1)[1].split(",") if f.strip()], "query"
            elif arg.startswith("--format="):
                fmt = {f.strip() for f in arg.split("=", 1)[1].split(",")}
                if "csv" not in fmt:
                    raise UsageError(f"Unsupported format: {arg.split('=', 1)[1]} (Maya's nvidia-smi writes csv)")
            elif arg in ("-i", "--id") and args:
                spec = args.pop(0)
            elif arg.startswith("--id="):
                spec = arg.split("=", 1)[1]
            else:
                raise UsageError(
                    f"option {' '.join([arg, *args[:1]]) if arg == 'topo' else arg!r} is not emulated by Maya's "
                    "nvidia-smi (it answers the default table, -L, --query-gpu=... --format=csv[,noheader][,nounits] "
                    "with -i, and topo -m)"
                )
        if mode == "query" and not fmt:
            raise UsageError("--query-gpu requires --format=csv")
        bad = [f for f in fields or [] if f not in FIELDS]
        if bad:
            raise UsageError(f'Field "{bad[0]}" is not a valid field to query.')
        nvml = Nvml(lib or ctypes.CDLL("libnvidia-ml.so.1"))
        ids = _ids(spec, nvml.count())
        lines = (
            topology(len(ids), *nvlinks(settings.EMU_CONFIG.get() or ""))
            if mode == "topo"
            else listing(nvml, ids)
            if mode == "list"
            else query(nvml, fields or [], fmt, ids)
            if mode == "query"
            else table(nvml, ids)
        )
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver ({e}): Maya's "
            "nvidia-smi runs inside `maya emulate`",
            file=sys.stderr,
        )
        return 9
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
