"""Result records of one config: its timed samples, its outcome, and its profiled kernels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .configs import KernelConfig

STATUSES = ("ok", "unsupported", "oom", "skipped_memory", "error")
"""`unsupported`: the op refused the config here (e.g. an SDPA backend that does not cover it);
`skipped_memory`: the memory guard's estimate exceeded the free memory; `error`: a CUDA error that
ended the session. Every status counts as done: a resumed campaign does not retry it."""


@dataclass(frozen=True)
class Samples:
    device_ns: list[int]
    host_ns: list[int]
    gpu_bound: bool
    """The device never waited for the host between timed calls."""


@dataclass(frozen=True)
class Timing:
    config: KernelConfig
    status: str
    footprint_bytes: int
    n_buffers: int
    samples: Samples | None = None
    error: str | None = None


@dataclass(frozen=True)
class KernelStats:
    """What torch.profiler saw of one config's profiled calls."""

    kernel_ns: int | None
    """Median over the profiled calls of the summed CUPTI durations of the call's device work."""
    kernel_names: list[str]
    """Device work of one call in launch order (kernel names; `Memcpy <kind>`, `Memset`)."""


def percentiles(values: Sequence[int]) -> tuple[int, int, int]:
    """(p10, median, p90)."""
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=np.float64), [10, 50, 90])
    return round(p10), round(p50), round(p90)
