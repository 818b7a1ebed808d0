"""Softmax and log-softmax over rows of `row` elements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..calls import element_bytes
from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, inductor_kernels, log2
from .rowwise import rows, rowwise_features

FLOPS_PER_ELEMENT = 5
"""Max, subtract, exponential, sum, divide."""
WARP_SOFTMAX_MAX_BYTES, WARP_SOFTMAX_MAX_ROW = 4096, 1024
"""PyTorch's persistent warp softmax takes rows up to 1024 elements and 4 KiB; wider rows take one thread
block per row (`cunn_SoftMaxForward`), which reads the row three times (max, sum of exponentials, output)."""
VECTOR_BYTES, MAX_BLOCK_THREADS = 16, 1024
BLOCK_KERNEL_REREADS = 2.0
"""Row-sized reads a block kernel repeats after its first pass: forward reads its input twice more (sum of
exponentials, output), backward its output and gradient once more (output)."""


def is_warp_kernel(row: np.ndarray, itemsize: np.ndarray) -> np.ndarray:
    return (row <= WARP_SOFTMAX_MAX_ROW) & (row * itemsize <= WARP_SOFTMAX_MAX_BYTES)


def l2_spill(row: np.ndarray, itemsize: np.ndarray, hw: HardwareArrays) -> np.ndarray:
    """Share of a block kernel's re-reads that miss L2: the rows resident on the whole GPU at once
    (one per block) beyond the L2 capacity; 0 for the warp kernel, which keeps its row in registers."""
    resident = hw.sm_count * blocks_per_sm(block_threads(row, itemsize), hw) * row * itemsize
    spill = np.clip(1.0 - hw.l2_bytes / resident, 0.0, 1.0)
    return np.where(is_warp_kernel(row, itemsize), 0.0, spill)


def blocks_per_sm(threads: np.ndarray, hw: HardwareArrays) -> np.ndarray:
    """Resident blocks per SM, as its thread limit allows."""
    return np.maximum(1.0, np.floor(hw.max_threads_per_sm / threads))


def block_threads(row: np.ndarray, itemsize: np.ndarray) -> np.ndarray:
    """PyTorch's `SoftMax_getBlockSize`: the power of two at or above half of min(row / ILP, 1024), at least
    a warp (ILP: elements per 16-byte vector load)."""
    half = np.minimum(row * itemsize / VECTOR_BYTES, MAX_BLOCK_THREADS) / 2
    return np.maximum(32.0, 2.0 ** np.ceil(np.log2(np.maximum(half, 1.0))))


class SoftmaxPredictor(FamilyPredictor):
    family = "softmax"
    ops = ("softmax", "log_softmax", "softmax_fwd", "softmax_bwd")
    same_kernel = inductor_kernels("softmax", kinds=("reduction", "persistent_reduction"))
    """Inductor's softmax reductions, forward and backward, as torch's softmax kernel (the one measured) of the
    same work."""

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        backward = calls["op"].str.contains("bwd|backward").to_numpy()
        passes = np.where(backward, 3.0, 2.0)  # forward: x in, y out; backward: y and dy in, dx out
        rereads = BLOCK_KERNEL_REREADS * l2_spill(_row(calls), itemsize, hw)
        return Work(flops=FLOPS_PER_ELEMENT * numel, bytes=itemsize * numel * (passes + rereads))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        row = _row(calls)
        itemsize = element_bytes(calls["dtype"])
        warp = is_warp_kernel(row, itemsize)
        threads = np.where(warp, 128.0, block_threads(row, itemsize))  # the warp kernel: 4 warps a block
        per_pass = threads * VECTOR_BYTES / itemsize  # elements one vectorised block iteration covers
        vector_passes = np.floor(row / per_pass)
        tail = row - vector_passes * per_pass  # loaded element by element after the vectorised loop
        resident_blocks = blocks_per_sm(threads, hw)
        rows_per_block = np.where(warp, np.where(row <= 128, 8.0, 4.0), 1.0)  # a warp does 1 or 2 short rows
        waves = rows(calls) / rows_per_block / (hw.sm_count * resident_blocks)
        warp_lanes = row / 2.0 ** np.ceil(np.log2(np.maximum(row, 1.0)))  # padding to a power of two
        return {
            **rowwise_features(calls, hw),
            "warp_softmax": warp.astype("float64"),
            "log2_block_threads": np.log2(threads),
            "block_loop_iterations": np.where(warp, np.nan, vector_passes + np.ceil(tail / threads)),
            "scalar_tail_share": np.where(warp, np.nan, tail / row),
            "warp_lane_use": np.where(warp, warp_lanes, np.nan),
            "log2_resident_row_bytes_over_l1": log2(resident_blocks * row * itemsize / hw.l1_bytes),
            "log2_block_waves": log2(waves),
            "block_wave_fill": waves / np.ceil(waves),
        }


def _row(calls: pd.DataFrame) -> np.ndarray:
    return calls["row"].fillna(calls["numel"]).to_numpy()
