"""Measuring configs on one device, in two passes.

1. `time_config`: memory guard, inputs, warm-up, then timed repeats (CUDA events and host clock),
   with the profiler off so that it costs nothing.
2. `profile`: a chunk of configs again under torch.profiler, each config's calls inside
   `maya.config:<key>` / `maya.repeat:<i>` annotations, exported as one Kineto trace.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..device_info import free_memory
from .configs import CONFIG_MARK, REPEAT_MARK, KernelConfig
from .footprint import buffer_count, fits, footprint
from .ops import build, op_settings
from .ops.inputs import Call, Inputs, Unsupported
from .results import Samples, Timing
from .timing import TimingSettings, make_timer

MAX_ERROR_CHARS = 500

T = TypeVar("T")


class CampaignAbort(Exception):
    """A CUDA error left the device unusable; `timing` records the config that raised it."""

    def __init__(self, timing: Timing):
        super().__init__(f"{timing.config.label()}: {timing.error}")
        self.timing = timing


def _is_fatal(e: BaseException) -> bool:
    accelerator_error = getattr(torch, "AcceleratorError", None)
    text = str(e)
    return (accelerator_error is not None and isinstance(e, accelerator_error)) or (
        "CUDA error" in text and "out of memory" not in text
    )


class Measurer:
    def __init__(self, device: torch.device, l2_bytes: int, settings: TimingSettings = TimingSettings()):
        self.device = device
        self.l2_bytes = l2_bytes
        self.settings = settings
        self.timer = make_timer(device, settings)

    def _rotating_call(self, config: KernelConfig, n_buffers: int) -> Call:
        call = build(config, Inputs(self.device, config.dtype, n_buffers, seed=int(config.key[:8], 16)))
        return lambda i: call(i % n_buffers)

    def _attempt(self, config: KernelConfig, work: Callable[[], T]) -> tuple[T | None, str, str | None]:
        """Run `work` under the config's settings: (result, status, error)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with op_settings(config):
                    return work(), "ok", None
            except torch.cuda.OutOfMemoryError as e:
                return None, "oom", str(e)[:MAX_ERROR_CHARS]
            except (Unsupported, RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                reasons = [str(e)] + [str(w.message) for w in caught[:3]]
                status = "error" if _is_fatal(e) else "unsupported"
                return None, status, " | ".join(reasons)[:MAX_ERROR_CHARS]

    def time_config(self, config: KernelConfig) -> Timing:
        """Pass 1. Raises `CampaignAbort` on a CUDA error."""
        fp = footprint(config)
        n_buffers = buffer_count(fp.rotated_bytes, self.l2_bytes)
        needed = fp.total(n_buffers)
        free = free_memory(self.device)
        if not fits(needed, free):
            return Timing(
                config, "skipped_memory", needed, n_buffers, error=f"needs about {needed} bytes; {free} bytes free"
            )

        def work() -> Samples:
            call = self._rotating_call(config, n_buffers)
            warm = self.timer.warm_up(call, self.settings.warmup)
            return self.timer.time(call, warm.repeats(self.settings), warm)

        samples, status, error = self._attempt(config, work)
        timing = Timing(config, status, needed, n_buffers, samples, error)
        if status == "error":
            raise CampaignAbort(timing)
        return timing

    def profile(self, timings: Sequence[Timing], trace_path: Path) -> None:
        """Pass 2: write the Kineto trace of `profiled_repeats` annotated calls of each config."""
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True) as prof:
            for t in timings:
                self._attempt(t.config, functools.partial(self._profile_one, t.config, t.n_buffers))
        prof.export_chrome_trace(str(trace_path))

    def _profile_one(self, config: KernelConfig, n_buffers: int) -> None:
        call = self._rotating_call(config, n_buffers)
        call(0)
        self.timer.synchronize()
        with record_function(f"{CONFIG_MARK}{config.key}"):
            for r in range(self.settings.profiled_repeats):
                with record_function(f"{REPEAT_MARK}{r}"):
                    call(r + 1)
        self.timer.synchronize()
