"""Matrix products (cuBLAS/cuBLASLt GEMMs, batched or not)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..calls import element_bytes
from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, alignment_bits, count_or_one, log2

TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 64), (64, 64), (32, 128))
"""Output tiles (rows x columns) common to cuBLAS and CUTLASS kernels; one resident tile per SM."""
UTILISATION_TILES: tuple[tuple[int, int], ...] = (
    (256, 128),
    (128, 256),
    (128, 128),
    (128, 64),
    (64, 128),
    (64, 64),
    (32, 32),
)
"""Candidate tiles whose utilisation (padding x tail-wave fill) is described; the kernel cuBLAS picks
tends to be the one that keeps the GPU busiest, hence also the best of them."""


class GemmPredictor(FamilyPredictor):
    family = "gemm"
    ops = ("mm", "bmm", "linear", "addmm", "baddbmm", "matmul", "linear_grad_input", "linear_grad_weight")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        b, m, n, k = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        return Work(flops=2 * b * m * n * k, bytes=itemsize * b * (m * k + k * n + m * n))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        b, m, n, k = count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()
        features = {
            "log2_m": log2(m),
            "log2_n": log2(n),
            "log2_k": log2(k),
            "log2_batch": log2(b),
            "m_alignment": alignment_bits(m),
            "n_alignment": alignment_bits(n),
            "k_alignment": alignment_bits(k),
            "log2_flops_per_sm": log2(2 * b * m * n * k / hw.sm_count),
        }
        for rows, cols in TILES:
            waves = b * np.ceil(m / rows) * np.ceil(n / cols) / hw.sm_count
            features[f"log2_waves_{rows}x{cols}"] = log2(waves)
            features[f"wave_fill_{rows}x{cols}"] = waves / np.ceil(waves)
        best = np.zeros(len(m))
        for rows, cols in UTILISATION_TILES:
            m_tiles, n_tiles = np.ceil(m / rows), np.ceil(n / cols)
            waves = b * m_tiles * n_tiles / hw.sm_count
            with np.errstate(divide="ignore", invalid="ignore"):
                used = m * n / (m_tiles * rows * n_tiles * cols) * waves / np.ceil(waves)
            features[f"utilisation_{rows}x{cols}"] = used
            best = np.fmax(best, used)
        features["best_utilisation"] = best
        with np.errstate(divide="ignore", invalid="ignore"):
            features["log2_k_over_mn"] = log2(k) - 0.5 * log2(m * n)  # long K loops on few tiles: split-K
        features["log2_output"] = log2(b * m * n)
        features["log2_operands_over_l2"] = log2(element_bytes(calls["dtype"]) * (m * k + k * n) / hw.l2_bytes)
        features["threads_per_sm"] = hw.max_threads_per_sm
        return features
