"""Launch floors and dispatch: what a call timed on its own costs however little work it does.

Measurements come in two timings. `device`: the kernel's own time on the GPU (a profiler's kernel
durations). `isolated`: CUDA events around one eager PyTorch call (NeuSight's protocol). The GPU has
finished the start event when the host is still dispatching (Python, the dispatcher, cuBLAS heuristics):
the kernel starts after that pre-launch dispatch, and the end event is enqueued `POST_LAUNCH_S` after the
launch, so an isolated call reads `dispatch + max(device time, POST_LAUNCH_S)`. The quickest isolated
call of a (hardware, op) is its floor, `dispatch + POST_LAUNCH_S`. NeuSight's floors are 25-50 us on every
GPU alike (`add`: 25.8 us on an A100, 25.6 us on a P4): host time, not the GPUs'.

The learned models predict device time relative to `max(DEVICE_FLOOR_S, roofline)`: how long the
simulator's stream is busy (host time is the simulator's host model). An isolated call on its floor (within
`FLOOR_JITTER`) says only that its kernel took at most the post-launch time and that jitter (and at least
its device floor and roofline).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MIN_ROWS = 20
"""Measurements a (hardware, op) pair needs for a floor of its own."""
DEVICE_FLOOR_S = 2e-6
"""The least device time of a kernel (launch of the grid on the GPU, one short wave, write-back): an
assumed order of magnitude for current GPUs, not measured here (tiny kernels run 1-3 us in GPU
timelines)."""
POST_LAUNCH_S = 12e-6
"""Host time of an isolated call after its launch, until the end event is enqueued. Measured on NeuSight's
elementwise sweeps: per GPU and op, the floor less the intercept of the bandwidth-bound regime (where
time grows with bytes); the median over 55 (GPU, op) pairs is 12.0 us (quartiles 10.2 and 15.0)."""
FLOOR_JITTER = 0.05
"""Isolated calls within this share of their floor above it count as on the floor: the host's dispatch
varies that much from call to call (NeuSight's calls of under 30,000 elements read 1.01-1.05x their
floor), and counting it as kernel time would price tiny kernels at the post-launch time."""
DEVICE, ISOLATED = "device", "isolated"
"""The timings a measurement can have (a measured frame's `timing` column)."""


@dataclass(frozen=True)
class LaunchFloors:
    by_op: dict[str, dict[str, float]] = field(default_factory=dict)
    """hardware -> op -> seconds."""
    by_hardware: dict[str, float] = field(default_factory=dict)
    """hardware -> seconds, over all of the family's ops (the least of them)."""

    @classmethod
    def measure(
        cls, hardware: np.ndarray, op: np.ndarray, measured_s: np.ndarray, roofline_s: np.ndarray
    ) -> LaunchFloors:
        """From isolated measurements: per group, the time its quickest call took, when that call was
        dominated by fixed cost (its roofline is at most half of it); groups without such a call get none."""
        frame = pd.DataFrame({"hardware": hardware, "op": op, "measured": measured_s, "roofline": roofline_s})

        def floor(group: pd.DataFrame) -> float | None:
            least = group.loc[group["measured"].idxmin()]
            if len(group) < MIN_ROWS or least["roofline"] > least["measured"] / 2:
                return None
            return float(least["measured"])

        by_op: dict[str, dict[str, float]] = {}
        for (name, op_name), group in frame.groupby(["hardware", "op"], sort=True):
            value = floor(group)
            if value is not None:
                by_op.setdefault(str(name), {})[str(op_name)] = value
        by_hardware = {
            str(name): value
            for name, group in frame.groupby("hardware", sort=True)
            if (value := floor(group)) is not None
        }
        return cls(by_op, by_hardware)

    def seconds(self, hardware: np.ndarray | pd.Series, op: np.ndarray | pd.Series) -> np.ndarray:
        """Per call: the floor of its (hardware, op); else its hardware's; for hardware never measured,
        the median over measured hardware of the op's floor, else of the hardware floors; else 0."""
        hardware_codes, hardware_names = pd.factorize(hardware)
        op_codes, op_names = pd.factorize(op)
        table = np.array([[self._pair(str(h), str(o)) for o in op_names] for h in hardware_names], dtype="float64")
        return table[hardware_codes, op_codes] if len(hardware_codes) else np.zeros(0)

    def dispatch_seconds(self, hardware: np.ndarray | pd.Series, op: np.ndarray | pd.Series) -> np.ndarray:
        """Per call: the host's dispatch before the launch in an isolated call, its floor less `POST_LAUNCH_S`."""
        return _dispatch(self.seconds(hardware, op))

    def device_time(
        self, hardware: np.ndarray | pd.Series, op: np.ndarray | pd.Series, measured_s: np.ndarray, isolated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of each measurement (seconds): the dispatch it includes (0 unless isolated), the time left after
        it, and for an isolated call on its floor the most its kernel can have taken (NaN where the
        measurement gives the device time)."""
        floor_s = self.seconds(hardware, op)
        dispatch_s = np.where(isolated, _dispatch(floor_s), 0.0)
        left_s = measured_s - dispatch_s
        bound_s = POST_LAUNCH_S + FLOOR_JITTER * floor_s
        return dispatch_s, left_s, np.where(isolated & (left_s <= bound_s), bound_s, np.nan)

    def _pair(self, hardware: str, op: str) -> float:
        if op in self.by_op.get(hardware, {}):
            return self.by_op[hardware][op]
        if hardware in self.by_hardware:
            return self.by_hardware[hardware]
        same_op = [ops[op] for ops in self.by_op.values() if op in ops]
        pool = same_op or list(self.by_hardware.values())
        return float(np.median(pool)) if pool else 0.0

    def to_json(self) -> dict:
        return {"by_op": self.by_op, "by_hardware": self.by_hardware}

    @classmethod
    def from_json(cls, data: dict) -> LaunchFloors:
        return cls(data["by_op"], data["by_hardware"])


def _dispatch(floor_s: np.ndarray) -> np.ndarray:
    """The dispatch before the launch in an isolated call on floors `floor_s`."""
    return np.maximum(floor_s - POST_LAUNCH_S, 0.0)


def isolated_seconds(dispatch_s: np.ndarray, device_s: np.ndarray) -> np.ndarray:
    """What an isolated call reads: the dispatch, then the kernel or the host's post-launch time, the longer."""
    return dispatch_s + np.maximum(device_s, POST_LAUNCH_S)
