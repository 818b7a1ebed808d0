"""The device-time oracle: what CUDA-event timings read under emulation.

Autotuners (Inductor's max-autotune and its pointwise/reduction config choices, flex-attention autotuning,
Triton's `@autotune` and `do_bench`, `cudnn.benchmark`) time candidate kernels with CUDA events and keep the
fastest. On virtual GPUs the host clock between two event records says nothing about the device, so the
emulator asks an oracle: the device-work records between the two events (`native/device_time.c` keeps them)
become `api_calls` rows (`convert.call_rows`) and the oracle returns each row's device time on the target
GPU; `cudaEventElapsedTime` answers their sum, and the trace marks the call (`args.device_time_ns`).

The emulator defines the interface; `resolve` names the oracle for `maya emulate --device-time` from the
warehouse alone (the launcher imports neither the simulator nor the estimators). Whoever launches the emulation
names the oracle in `MAYA_EMU_DEVICE_TIME`, a JSON object `{"factory": "module:callable", "options": {...}}`: the runner imports
the factory and calls it with the options (`maya emulate` names `maya.simulator.device_time:oracle`, which
prices with the estimators or the roofline). Each distinct call is priced once per rank; a failing oracle
leaves event timings on host time and the rank's status says why.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from maya.core import settings

from .capture_format import K_COLL, RECORD_DTYPE

if TYPE_CHECKING:  # pandas and the converter (pyarrow) load at the first timing: most ranks never time
    import pandas as pd

ORACLE_ENV = settings.EMU_DEVICE_TIME.name
"""JSON naming the device-time oracle's factory and its options (set by the launcher; unset: host time)."""
ORACLE_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)


class DeviceTimeOracle(Protocol):
    """Prices device calls on the target GPU."""

    name: str
    """What made the estimates, e.g. `estimators v3 on h100-sxm` (recorded in the run's attributes)."""

    def device_ns(self, calls: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
        """Device time (ns) of each row of `calls` (`api_calls` rows with no op context), `kernels` the
        dictionary their `kernel_id`s refer to."""
        ...


FACTORY = "maya.simulator.device_time:oracle"
"""The oracle `maya emulate` names (`spec`): Maya's estimate of the work on the target GPU."""
CHOICES = ("estimators", "roofline", "host")
"""`maya emulate --device-time`: the estimators (a registered version, else the roofline), the roofline, or
host time (no oracle)."""


def spec(factory: str, **options) -> str:
    """The `MAYA_EMU_DEVICE_TIME` value naming `factory` ("module:callable") and its keyword options."""
    return json.dumps({"factory": factory, "options": options})


def load(value: str) -> DeviceTimeOracle:
    """The oracle a `MAYA_EMU_DEVICE_TIME` value names."""
    described = json.loads(value)
    module, _, name = described["factory"].partition(":")
    return getattr(importlib.import_module(module), name)(**described.get("options", {}))


def resolve(choice: str, version: str = "latest", warehouse: str | None = None) -> tuple[dict | None, str]:
    """`maya emulate --device-time CHOICE`: the oracle's options (None for host time) and what it is, e.g.
    `estimators v3`. `estimators` with no version registered, or its artifact missing or altered, falls back to
    the roofline and says so. The estimator itself is loaded by the rank, at its first timing: one that cannot
    load (an artifact of an older format) leaves the rank's oracle on the roofline, and its status says so."""
    if choice not in CHOICES:
        raise ValueError(f"unknown --device-time {choice!r}; choose from {', '.join(CHOICES)}")
    if choice == "host":
        return None, "host time (no device-time oracle)"
    if choice == "estimators":
        from maya.core.estimator_versions import RegistryError

        try:
            chosen = registered_version(version, warehouse)
        except RegistryError as e:
            return {"durations": "roofline"}, f"roofline (estimators not available: {e})"
        return {
            "durations": "estimators",
            "version": chosen,
            **({"warehouse": str(warehouse)} if warehouse else {}),
        }, f"estimators {chosen}"
    return {"durations": "roofline"}, "roofline"


def registered_version(version: str = "latest", warehouse: str | Path | None = None) -> str:
    """The estimator version `version` (a version or the `latest` alias) names, its artifact present with its
    registered SHA-256 (`core.estimator_versions`; `RegistryError` says what is wrong), without importing
    `maya.estimators` (XGBoost, scikit-learn), the simulator or pandas: loading the estimator to name it cost every
    `maya emulate` about 5 CPU-seconds."""
    from maya.core.estimator_versions import artifact_bytes, resolve
    from maya.core.paths import warehouse_path

    path = Path(warehouse) if warehouse else warehouse_path()
    record = resolve(path, version)
    artifact_bytes(path, record)
    return record.version


class _Answering:
    """The native callback: records -> summed device time, each distinct call priced once."""

    def __init__(self, raw: Path, value: str):
        self.raw, self.value = raw, value
        self.oracle: DeviceTimeOracle | None = None  # loaded at the first timing (most scripts never time)
        self.cache: dict[bytes, float] = {}
        self.timings = self.priced = 0
        self.seconds = 0.0
        self.error: str | None = None
        self.callback = ORACLE_FN(self._answer)

    def _answer(self, pointer: int | None, n: int) -> float:
        if self.error is not None:
            return -1.0
        start = time.perf_counter()
        try:
            if self.oracle is None:
                self.oracle = load(self.value)
            records = (
                np.frombuffer(
                    (ctypes.c_char * (n * RECORD_DTYPE.itemsize)).from_address(pointer), dtype=RECORD_DTYPE
                ).copy()
                if n
                else np.empty(0, RECORD_DTYPE)
            )
            ns = self._price(records)
            self.timings += 1
            return ns
        except Exception as e:  # noqa: BLE001 - never into the script: timings fall back to host time
            self.error = f"{type(e).__name__}: {e}"
            print(
                f"maya emulator: the device-time oracle failed ({self.error}); CUDA-event timings read host time "
                "from here on",
                file=sys.stderr,
            )
            return -1.0
        finally:
            self.seconds += time.perf_counter() - start

    def _price(self, records: np.ndarray) -> float:
        """Summed device time of the records; calls not priced before go to the oracle in one frame."""
        payload = np.concatenate(
            [records["kind"][:, None].astype("<i8"), records["api"][:, None].astype("<i8"), records["a"]], axis=1
        )
        payload[records["kind"] == K_COLL, 2 + 6] = 0  # a collective's sequence number is not its work
        keys = [row.tobytes() for row in payload]
        unknown: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key not in self.cache and key not in unknown:
                unknown[key] = i
        if unknown:
            from .convert import call_rows

            rows = records[list(unknown.values())]
            calls, kernels = call_rows(self.raw, rows)
            priced = np.asarray(self.oracle.device_ns(calls.to_pandas(), kernels.to_pandas()), dtype="float64")
            self.cache.update(zip(unknown, np.nan_to_num(priced, nan=0.0).tolist()))
            self.priced += len(unknown)
        return float(sum(self.cache[key] for key in keys))

    def report(self) -> dict:
        """What the rank's status says about its timings."""
        return {
            "oracle": getattr(self.oracle, "name", None),
            "timings": self.timings,
            "calls_priced": self.priced,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


def install(raw: Path) -> _Answering | None:
    """Answer this rank's event timings with the oracle `MAYA_EMU_DEVICE_TIME` names (None: it names none)."""
    value = os.environ.get(ORACLE_ENV)
    if not value:
        return None
    answering = _Answering(raw, value)
    ctypes.CDLL(None).maya_emu_set_device_time(answering.callback)
    return answering
