"""Matrix products (cuBLAS/cuBLASLt GEMMs, batched or not)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .family_base import FamilyPredictor, Work, alignment_bits, count_or_one, log2
from .hardware_table import HardwareArrays

TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 64), (64, 64), (32, 128))
"""Output tiles (rows x columns) common to cuBLAS and CUTLASS kernels; one resident tile per SM."""


class GemmPredictor(FamilyPredictor):
    family = "gemm"
    ops = ("mm", "bmm", "linear", "addmm", "baddbmm", "matmul", "linear_grad_input", "linear_grad_weight")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        b, m, n, k = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        return Work(flops=2 * b * m * n * k, bytes=itemsize * b * (m * k + k * n + m * n))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        b, m, n, k = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        features = {"log2_m": log2(m), "log2_n": log2(n), "log2_k": log2(k), "log2_batch": log2(b),
                    "m_alignment": alignment_bits(m), "n_alignment": alignment_bits(n),
                    "k_alignment": alignment_bits(k),
                    "log2_flops_per_sm": log2(2 * b * m * n * k / hw.sm_count)}
        for rows, cols in TILES:
            waves = b * np.ceil(m / rows) * np.ceil(n / cols) / hw.sm_count
            features[f"log2_waves_{rows}x{cols}"] = log2(waves)
            features[f"wave_fill_{rows}x{cols}"] = waves / np.ceil(waves)
        return features
