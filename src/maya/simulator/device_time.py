"""The device-time oracle `maya emulate` installs in its ranks (`maya.emulator.device_time`): CUDA-event timings
read Maya's own estimate of the work between the events on the target GPU, so autotuners keep the kernels Maya
ranks fastest, as a real GPU's timings would make them keep the fastest there.

The oracle prices calls as `maya predict` does: the work frame (`work.py`: GEMM and attention records, Triton
launches' arguments, copies) priced by the estimators (a registered version) or the analytical roofline, and
Triton GEMM templates slowed by their tile's fit (`launch_shape.py`). Calls carry no op context inside the
emulator, so a kernel sized only by its enclosing aten op is priced as unknown work.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from maya.core import hardware as catalog

from .durations import DurationProvider, RooflineDurations
from .durations.estimated import EstimatorsUnavailable
from .launch_shape import launch_factor
from .opcodes import classify
from .trace import RankTrace
from .work import work_frame


class EstimatedDeviceTime:
    """Device time of api_calls rows on one catalog GPU by a `DurationProvider`."""

    def __init__(self, hardware: str, provider: DurationProvider, fallback: str | None = None):
        self.hardware = catalog.get(hardware)
        self.provider = provider
        self.name = f"{provider.name} on {self.hardware.name}" + (f" ({fallback})" if fallback else "")

    def device_ns(self, calls: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
        empty = pd.DataFrame(columns=["op_id", "name", "input_shapes", "input_dtypes"])
        opcodes = classify(calls)
        frame = work_frame(RankTrace(0, calls, empty, kernels, pd.DataFrame(), pd.DataFrame()), opcodes)
        frame = pd.concat([calls, frame], axis=1)
        frame["opcode"] = opcodes
        frame["comm_size"] = frame["comm_nodes"] = np.nan
        frame["comm_gpus"] = None
        return self.provider.device_ns(frame, self.hardware) * launch_factor(frame, self.hardware)


def provider(durations: str, version: str = "latest", warehouse: str | None = None) -> DurationProvider:
    """The provider an oracle prices with: `estimators` (the registered version; none registered: an error
    naming it) or `roofline`."""
    if durations == "roofline":
        return RooflineDurations()
    if durations == "estimators":
        from .durations.estimated import EstimatorDurations

        return EstimatorDurations(version, warehouse=warehouse)
    raise ValueError(f"unknown device-time oracle {durations!r}; choose from estimators, roofline")


def oracle(
    hardware: str, durations: str = "estimators", version: str = "latest", warehouse: str | None = None
) -> EstimatedDeviceTime:
    """The oracle a rank loads (`maya.emulator.device_time.load`). Estimators that cannot load (the version's
    artifact unreadable, `maya.estimators` not importable) leave the roofline pricing, and the oracle's name,
    which the rank's status and `maya predict`'s notes carry, says why."""
    try:
        return EstimatedDeviceTime(hardware, provider(durations, version, warehouse))
    except EstimatorsUnavailable as e:
        return EstimatedDeviceTime(hardware, RooflineDurations(), fallback=str(e))


TIMING_API = "cudaEventElapsedTime"
STATISTICS_SITES = frozenset({"DistributedDataParallel.forward"})
"""Ops whose CUDA-event timings are a framework's own statistics, which choose nothing: DDP times its passes for its
logging data (`DistributedDataParallel._get_ddp_logging_data`), every few iterations."""


def timing_notes(traces, hardware: str) -> list[str]:
    """What `maya predict` says about the run's CUDA-event timings: which oracle answered them (so which
    estimate chose the kernels autotuners kept), or that they read host time."""
    timings = answered = 0
    sites: dict[str, int] = {}
    for trace in traces.ranks.values():
        rows = trace.calls["api"] == TIMING_API
        timings += int(rows.sum())
        answered += int(trace.calls.loc[rows, "args"].fillna("").str.contains("device_time_ns", regex=False).sum())
        timed_ops = trace.calls.loc[rows, "op_id"]
        names = {}
        if rows.any() and len(trace.ops):
            ops = trace.ops[trace.ops["op_id"].isin(timed_ops)]
            names = dict(zip(ops["op_id"].tolist(), ops["name"].tolist()))
        for op in timed_ops.tolist():
            name = names.get(op, "(no op)") if op == op else "(no op)"
            sites[name] = sites.get(name, 0) + 1
    if not timings:
        return []
    if set(sites) <= STATISTICS_SITES:
        return [
            f"{timings} CUDA-event timings, all DDP's statistics of its own passes ({', '.join(sorted(sites))}): "
            "no kernel was chosen by timing"
        ]
    # who timed: an autotuner, or a framework's own statistics (DDP times its forward and backward passes)
    where = (
        " (timed in "
        + ", ".join(f"{name} {n}" for name, n in sorted(sites.items(), key=lambda kv: -kv[1])[:3])
        + (", ..." if len(sites) > 3 else "")
        + ")"
    )
    attrs = traces.attrs
    options = (attrs.get("device_time") or {}).get("options") or {}
    answers = [a for a in (attrs.get("device_time_answers") or {}).values() if a]
    if not answered:
        failed = next((a["error"] for a in answers if a.get("error")), None)
        why = f"the device-time oracle failed ({failed})" if failed else "emulated without a device-time oracle"
        return [
            f"{timings} CUDA-event timings read host time ({why}){where}: kernels chosen by timing them "
            "(autotuning) are not the ones a GPU would pick"
        ]
    oracle = next((a["oracle"] for a in answers if a.get("oracle")), None) or options.get("durations", "an oracle")
    note = (
        f"{answered} of {timings} CUDA-event timings read Maya's estimate ({oracle}), not host time{where}: "
        "autotuned choices (Inductor max-autotune and config tuning, Triton @autotune, cudnn.benchmark) are "
        "the ones that estimate ranks fastest"
    )
    target = options.get("hardware")
    if target and target != hardware:
        note += f"; they were made for {target}, not the {hardware} predicted here"
    return [note]
