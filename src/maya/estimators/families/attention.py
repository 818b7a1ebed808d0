"""Fused attention (flash / cuDNN / memory-efficient SDPA), forward and backward."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .base import FamilyPredictor, Work, count_or_one, log2
from ..hardware_table import HardwareArrays

QUERY_TILE = 128
"""Query rows per thread block in flash-attention kernels."""
BACKWARD_FLOPS = 2.5
"""Backward / forward FLOPs (dQ, dK, dV and the recomputed scores)."""


class AttentionPredictor(FamilyPredictor):
    family = "attention"
    ops = ("sdpa_fwd", "sdpa_bwd", "flash_fwd", "flash_bwd")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        b, m, n, d = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        backward = calls["op"].str.contains("bwd|backward").to_numpy()
        flops = 4 * b * m * n * d * np.where(backward, BACKWARD_FLOPS, 1.0)
        # forward reads Q, K, V and writes O; backward also reads O, dO and writes dQ, dK, dV
        tensors = np.where(backward, 2.0, 1.0) * 2 * (m + n) * d
        return Work(flops=flops, bytes=itemsize * b * tensors)

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        b, m, n, d = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        waves = b * np.ceil(m / QUERY_TILE) / hw.sm_count
        return {"log2_batch": log2(b), "log2_query": log2(m), "log2_key": log2(n), "log2_head_dim": log2(d),
                "log2_waves": log2(waves), "wave_fill": waves / np.ceil(waves)}
