"""Iteration times: the interval between the ends of consecutive iterations.

One code path for both kinds of device, only the clock differs: on CUDA the ends are CUDA events
recorded on the current stream (device time, `cuda_events`), elsewhere host wall-clock readings
(`wall_clock`). The host wall clock is read at every end either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..kernels.results import percentiles


class DeviceClock(Protocol):
    """Marks the end of an iteration and measures between two marks (not the emulator's `IterationClock`)."""

    source: str
    """How iterations are timed, as recorded in results: `cuda_events` or `wall_clock`."""

    def mark(self) -> Any: ...

    def elapsed_ns(self, start: Any, end: Any) -> int: ...


class WallClock:
    source = "wall_clock"

    def __init__(self, now: Callable[[], int] = time.perf_counter_ns):
        self.now = now

    def mark(self) -> int:
        return self.now()

    def elapsed_ns(self, start: int, end: int) -> int:
        return end - start


class CudaEventClock:
    source = "cuda_events"

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ns(self, start: torch.cuda.Event, end: torch.cuda.Event) -> int:
        end.synchronize()
        return round(start.elapsed_time(end) * 1e6)


def iteration_clock(device: torch.device) -> DeviceClock:
    return CudaEventClock() if device.type == "cuda" else WallClock()


class IterationTimer:
    """Records the end of each iteration; iteration i (0-based) lasts from end i-1 to end i."""

    def __init__(self, clock: DeviceClock, host: WallClock | None = None):
        self.clock = clock
        self.host = host or WallClock()
        self._ends: list[Any] = []
        self._host_ends: list[int] = []

    @property
    def count(self) -> int:
        """Iterations ended so far."""
        return len(self._ends)

    def mark(self) -> None:
        self._host_ends.append(self.host.mark())
        self._ends.append(self.clock.mark())

    def durations(self, first: int, stop: int) -> tuple[list[int], list[int]]:
        """Device (or wall-clock) and host durations in ns of iterations `first` to `stop - 1` that
        have ended; `first` >= 1, since the first iteration has no start."""
        if first < 1:
            raise ValueError("iteration 0 has no start to time it from")
        ends = range(first, min(stop, self.count))
        return (
            [self.clock.elapsed_ns(self._ends[i - 1], self._ends[i]) for i in ends],
            [self._host_ends[i] - self._host_ends[i - 1] for i in ends],
        )


@dataclass(frozen=True)
class IterationStats:
    median_ns: int
    p10_ns: int
    p90_ns: int
    mean_ns: int

    @classmethod
    def of(cls, durations_ns: Sequence[int]) -> IterationStats:
        """Median, 10th and 90th percentile (linear interpolation) and mean."""
        p10, median, p90 = percentiles(durations_ns)
        return cls(median, p10, p90, round(float(np.mean(durations_ns))))
