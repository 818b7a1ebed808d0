"""Softmax and log-softmax over rows of `row` elements."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .calls import element_bytes
from .family_base import FamilyPredictor, Work, log2
from .family_rowwise import rows, rowwise_features
from .hardware_table import HardwareArrays

FLOPS_PER_ELEMENT = 5
"""Max, subtract, exponential, sum, divide."""
WARP_SOFTMAX_MAX_ROW = 1024
"""PyTorch's persistent warp softmax handles rows up to this many elements; wider rows take one
thread block per row (up to 1024 threads, 4 elements a thread per load)."""


class SoftmaxPredictor(FamilyPredictor):
    family = "softmax"
    ops = ("softmax", "log_softmax", "softmax_fwd", "softmax_bwd")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        backward = calls["op"].str.contains("bwd|backward").to_numpy()
        # forward: x in, y out; backward: y and dy in, dx out
        return Work(flops=FLOPS_PER_ELEMENT * numel, bytes=itemsize * numel * np.where(backward, 3.0, 2.0))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        row = calls["row"].fillna(calls["numel"]).to_numpy()
        threads = np.minimum(1024.0, 2.0 ** np.ceil(np.log2(np.maximum(row / 4, 32))))
        blocks_per_sm = np.maximum(1.0, np.floor(hw.max_threads_per_sm / threads))
        waves = rows(calls) / (hw.sm_count * blocks_per_sm)
        return {**rowwise_features(calls, hw),
                "log2_row_bytes_over_shared": log2(element_bytes(calls["dtype"]) * row / hw.shared_mem_per_sm),
                "log2_row_over_warp_limit": log2(row / WARP_SOFTMAX_MAX_ROW),
                "warp_softmax": (row <= WARP_SOFTMAX_MAX_ROW).astype("float64"),
                "log2_block_waves": log2(waves), "block_wave_fill": waves / np.ceil(waves),
                "log2_elements_per_thread": log2(row / threads)}
