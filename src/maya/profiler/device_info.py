"""What the measurements ran on: device properties, software versions, clocks, free memory.

Clocks and the driver version are read (never set) with `nvidia-smi --query-gpu`, when present.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import torch

from maya_trace_spec import SPEC_VERSION

SMI_CLOCK_FIELDS = (
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
    "pstate",
)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    index: int | None
    sm_major: int | None
    sm_minor: int | None
    sm_count: int | None
    memory_bytes: int | None
    l2_bytes: int
    hostname: str

    def as_dict(self) -> dict:
        return asdict(self)


def describe_device(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        return DeviceInfo(
            p.name,
            index,
            p.major,
            p.minor,
            p.multi_processor_count,
            p.total_memory,
            getattr(p, "L2_cache_size", 0),
            socket.gethostname(),
        )
    return DeviceInfo(
        f"cpu {platform.machine()}", None, None, None, None, _host_memory_bytes(), 0, socket.gethostname()
    )


def free_memory(device: torch.device) -> int:
    """Bytes a new allocation can use: free device memory plus what torch's allocator caches unused."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _host_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _nvidia_smi(fields: tuple[str, ...], index: int | None) -> dict[str, str] | None:
    """`nvidia-smi --query-gpu=FIELDS` for one GPU, or None when it is missing or fails."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if index is not None:
        cmd.append(f"--id={index}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(fields, values)) if len(values) == len(fields) else None


def read_clocks(info: DeviceInfo) -> dict:
    """Current and maximum SM/memory clocks (MHz), temperature, power and performance state."""
    if info.index is None:
        return {"source": "none"}
    smi = _nvidia_smi(SMI_CLOCK_FIELDS, info.index)
    if smi is not None:
        return {"source": "nvidia-smi", **smi}
    try:
        return {"source": "torch", "clocks.sm": torch.cuda.clock_rate(info.index)}
    except Exception as e:  # needs pynvml, which GPU hosts may lack
        return {"source": "none", "error": f"{type(e).__name__}: {e}"}


def software_versions(info: DeviceInfo) -> dict:
    smi = _nvidia_smi(("driver_version",), info.index) if info.index is not None else None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "driver": smi["driver_version"] if smi else None,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "maya_trace_spec": SPEC_VERSION,
        "platform": platform.platform(),
    }
