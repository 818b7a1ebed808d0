"""The run's allocator peaks kept across every reset torch offers a script (a stand-in for torch's allocator)."""

from types import SimpleNamespace

import pytest

from maya.emulator.allocator_peaks import AllocatorPeaks


def allocator(resets: tuple[str, ...]) -> SimpleNamespace:
    """torch's CUDA allocator statistics on one device, its peaks cleared by each of `resets` (torch._C's names)."""
    stats = {"allocated_bytes.all.peak": 0, "reserved_bytes.all.peak": 0}

    def clear(device: int) -> None:
        stats.update({k: 0 for k in stats})

    torch = SimpleNamespace(
        _C=SimpleNamespace(**{name: clear for name in resets}),
        cuda=SimpleNamespace(
            memory_stats=lambda device: dict(stats), is_initialized=lambda: True, device_count=lambda: 1
        ),
    )
    torch.stats = stats
    return torch


@pytest.mark.parametrize("reset", ["_cuda_resetPeakMemoryStats", "_accelerator_resetPeakStats"])
def test_a_reset_by_either_api_keeps_the_peak_it_clears(reset):
    """`torch.cuda.reset_peak_memory_stats` and (torch 2.9 and later) `torch.accelerator.reset_peak_memory_stats`:
    the script's statistics read 0 after the reset, the record keeps the 100 MiB peak before it."""
    torch = allocator(("_cuda_resetPeakMemoryStats", "_accelerator_resetPeakStats"))
    peaks = AllocatorPeaks(torch)
    torch.stats.update({"allocated_bytes.all.peak": 100 << 20, "reserved_bytes.all.peak": 128 << 20})
    getattr(torch._C, reset)(0)
    assert torch.cuda.memory_stats(0)["allocated_bytes.all.peak"] == 0
    torch.stats.update({"allocated_bytes.all.peak": 4096, "reserved_bytes.all.peak": 2 << 20})
    assert peaks.read() == {"0": {"allocated_bytes": 100 << 20, "reserved_bytes": 128 << 20}}


def test_a_torch_without_the_accelerator_reset_is_left_without_it():
    """torch before 2.9 has no `_accelerator_resetPeakStats`: none is added."""
    torch = allocator(("_cuda_resetPeakMemoryStats",))
    AllocatorPeaks(torch)
    assert not hasattr(torch._C, "_accelerator_resetPeakStats")
