"""Host (CPU) cost of each device-API call: the time the calling thread spends in the CUDA stack
before it can issue the next call. The emulator answers calls without that cost, so the simulator
adds it back per call.

Defaults are per API class (`DEFAULT_CLASS_NS`): engineering orders of magnitude for a modern x86
host and CUDA 12/13, not measurements. `HostOverheadModel.calibrated` replaces them, API by API, by
the median host duration measured in profiled runs (`api_calls` rows with `time_source = measured`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from maya_trace_spec import Run

API_CLASSES: tuple[tuple[str, str], ...] = (
    ("launch", r"launchkernel|launchcooperative|graphlaunch"),
    ("library", r"^(cublas|cublaslt|cudnn)"),
    ("collective", r"^nccl"),
    ("copy", r"memcpy|memset"),
    ("allocation", r"malloc|free|memalloc|mempool"),
    ("synchronize", r"synchronize"),
    ("event", r"event|streamwait|streamquery"),
)
"""(class, pattern on the lower-cased API name), first match wins; anything else is `other`."""
DEFAULT_CLASS_NS: dict[str, float] = {
    "launch": 4_000,
    "library": 8_000,
    "collective": 6_000,
    "copy": 5_000,
    "allocation": 10_000,
    "synchronize": 2_000,
    "event": 1_000,
    "other": 500,
}
"""Host nanoseconds per call of each class (the host side only: waiting for the device is the
simulator's business)."""
MIN_MEASURED_CALLS = 5
"""An API is calibrated from measurements once it was measured at least this many times."""


def api_class(api: str) -> str:
    lower = api.lower()
    return next((name for name, pattern in API_CLASSES if re.search(pattern, lower)), "other")


@dataclass(frozen=True)
class HostOverheadModel:
    measured_ns: dict[str, float] = field(default_factory=dict)
    """Calibrated per-API medians, taking precedence over the class defaults."""
    class_ns: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CLASS_NS))

    def api_ns(self, api: str) -> float:
        return self.measured_ns.get(api, self.class_ns[api_class(api)])

    def predict(self, api: pd.Series) -> np.ndarray:
        """Host nanoseconds per call, for a column of API names."""
        codes, names = pd.factorize(api)
        return np.array([self.api_ns(n) for n in names], dtype="float64")[codes]

    @classmethod
    def calibrated(cls, api_calls: pd.DataFrame, min_calls: int = MIN_MEASURED_CALLS) -> HostOverheadModel:
        """Defaults overridden by the median measured host duration of every API measured often enough."""
        measured = api_calls[(api_calls["time_source"] == "measured") & api_calls["duration_ns"].notna()]
        stats = measured.groupby("api")["duration_ns"].agg(["median", "size"])
        return cls(
            measured_ns={str(api): float(row["median"]) for api, row in stats.iterrows() if row["size"] >= min_calls}
        )

    @classmethod
    def from_runs(cls, run_dirs: list[Path], min_calls: int = MIN_MEASURED_CALLS) -> HostOverheadModel:
        """Calibrated on the api_calls of measured maya_trace_spec runs."""
        tables = [Run(d).table("api_calls").select(["api", "duration_ns", "time_source"]).to_pandas() for d in run_dirs]
        return cls.calibrated(pd.concat(tables, ignore_index=True), min_calls) if tables else cls()
