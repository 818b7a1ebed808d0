"""Timing one op: warm-up, then repeated calls, each timed on the device with CUDA events and on the
host with a wall clock.

On CUDA a spin kernel (`torch.cuda._sleep`) is queued ahead of the timed calls, long enough for the
host to queue them all while the GPU spins: the event intervals then measure the device alone, not
the host's launch rate, and the host times measure dispatch and launch cost with the GPU not the
bottleneck. The gaps between consecutive calls on the device tell whether that held (`gpu_bound`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

import torch

from .ops.inputs import Call
from .results import Samples


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 3
    min_repeats: int = 10
    max_repeats: int = 100
    target_s: float = 0.05
    """Device time to spend on the timed repeats of one config (within the repeat bounds)."""
    profiled_repeats: int = 3
    """Calls recorded under torch.profiler per config (kernel names, launch parameters, CUPTI times)."""
    max_spin_s: float = 0.25


@dataclass(frozen=True)
class WarmUp:
    device_s: float
    host_s: float

    def repeats(self, settings: TimingSettings) -> int:
        wanted = math.ceil(settings.target_s / max(self.device_s, 1e-7))
        return max(settings.min_repeats, min(settings.max_repeats, wanted))


class Timer(Protocol):
    def warm_up(self, call: Call, count: int) -> WarmUp: ...

    def time(self, call: Call, repeats: int, warm: WarmUp) -> Samples: ...

    def synchronize(self) -> None: ...


class CpuTimer:
    """Times ops on CPU tensors (tests exercise the measurement loop with it): device time is host time."""

    def synchronize(self) -> None:
        pass

    def warm_up(self, call: Call, count: int) -> WarmUp:
        call(0)
        start = time.perf_counter()
        for i in range(1, count + 1):
            call(i)
        per_call = (time.perf_counter() - start) / count
        return WarmUp(per_call, per_call)

    def time(self, call: Call, repeats: int, warm: WarmUp) -> Samples:
        host = []
        for i in range(repeats):
            start = time.perf_counter_ns()
            call(i)
            host.append(time.perf_counter_ns() - start)
        return Samples(host, host, gpu_bound=False)


class CudaTimer:
    EVENT_RECORD_S = 5e-6
    """Host cost of recording the two events around a call (generous)."""
    MAX_GAP_NS = 2000
    """Largest device idle time between calls that still counts as the device never waiting."""

    def __init__(self, settings: TimingSettings):
        self.settings = settings
        self.ns_per_cycle = self._spin_calibration()

    @staticmethod
    def _event() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    def _spin_calibration(self) -> float:
        cycles = 20_000_000
        torch.cuda._sleep(1000)
        start, end = self._event(), self._event()
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6 / cycles

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def warm_up(self, call: Call, count: int) -> WarmUp:
        call(0)  # lazy initialisation, plan selection, autotuning
        torch.cuda.synchronize()
        start, end = self._event(), self._event()
        start.record()
        t0 = time.perf_counter()
        for i in range(1, count + 1):
            call(i)
        host = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return WarmUp(start.elapsed_time(end) / 1e3 / count, host / count)

    def time(self, call: Call, repeats: int, warm: WarmUp) -> Samples:
        starts = [self._event() for _ in range(repeats)]
        ends = [self._event() for _ in range(repeats)]
        lead = repeats * max(0.0, warm.host_s + self.EVENT_RECORD_S - warm.device_s) * 1.5 + 20e-6
        spin_cycles = int(min(self.settings.max_spin_s, lead) * 1e9 / self.ns_per_cycle)
        host = []
        torch.cuda.synchronize()
        torch.cuda._sleep(spin_cycles)
        for i in range(repeats):
            starts[i].record()
            t0 = time.perf_counter_ns()
            call(i)
            host.append(time.perf_counter_ns() - t0)
            ends[i].record()
        torch.cuda.synchronize()
        device = [round(s.elapsed_time(e) * 1e6) for s, e in zip(starts, ends)]
        gaps = [ends[i - 1].elapsed_time(starts[i]) * 1e6 for i in range(1, repeats)]
        return Samples(device, host, gpu_bound=max(gaps, default=0.0) <= self.MAX_GAP_NS)


def make_timer(device: torch.device, settings: TimingSettings) -> Timer:
    return CudaTimer(settings) if device.type == "cuda" else CpuTimer()
