"""torch's CUDA caching-allocator peaks over a rank's whole run, kept across the script's own resets.

A script that resets the peak statistics each step (torchtune logs `max_memory_allocated()` and calls
`reset_peak_memory_stats()`) would leave only its last step's peak for the run's attrs `allocator_peaks`. Each reset
first folds the peaks it clears into the rank's record; the script reads its statistics as a GPU gives them.
"""

from __future__ import annotations

from typing import Any

PEAKS = {"allocated_bytes": "allocated_bytes.all.peak", "reserved_bytes": "reserved_bytes.all.peak"}
"""The record's names of the peaks, and torch's `memory_stats` keys for them."""

RESETS = ("_cuda_resetPeakMemoryStats", "_accelerator_resetPeakStats")
"""What resets the peaks: `torch.cuda.reset_peak_memory_stats` (and its aliases) and, in torch 2.9 and later,
`torch.accelerator.reset_peak_memory_stats` (CUDA is the emulated accelerator); wrapped where torch has them."""


class AllocatorPeaks:
    """Per device, the largest peaks torch's allocator reached, whatever the script reset."""

    def __init__(self, torch: Any):
        self.torch = torch
        self.cleared: dict[int, dict[str, int]] = {}
        for name in RESETS:
            if hasattr(torch._C, name):
                setattr(torch._C, name, self._keeping_peaks(getattr(torch._C, name)))

    def _keeping_peaks(self, reset: Any) -> Any:
        """`reset(device)` that first folds the peaks it clears into the record."""

        def keeping_peaks(device: int) -> None:
            self._fold(device, self._stats(device))
            reset(device)

        return keeping_peaks

    def _stats(self, device: int) -> dict[str, int]:
        try:
            stats = self.torch.cuda.memory_stats(device)
        except Exception:  # e.g. "CUDAPluggableAllocator does not yet support getDeviceStats"
            return {}
        return {name: int(stats.get(key, 0)) for name, key in PEAKS.items()}

    def _fold(self, device: int, peaks: dict[str, int]) -> None:
        kept = self.cleared.setdefault(device, {})
        for name, value in peaks.items():
            kept[name] = max(kept.get(name, 0), value)

    def read(self) -> dict[str, dict[str, int]]:
        """Per device the rank used: the peak bytes torch's CUDA caching allocator handed out to tensors
        (`max_memory_allocated`) and held from the device (`max_memory_reserved`: what the stubs' memory events
        record) over the whole run; empty when it never initialised CUDA. Best effort: a device whose statistics
        cannot be read (a script that swapped in a `CUDAPluggableAllocator`, which has none) records no peaks, and
        the prediction falls back as it does for captures that predate them."""
        try:
            if not self.torch.cuda.is_initialized():
                return {}
            devices = self.torch.cuda.device_count()
        except Exception:
            return {}
        for device in range(devices):
            self._fold(device, self._stats(device))
        return {str(d): dict(p) for d, p in sorted(self.cleared.items()) if p.get("reserved_bytes")}
