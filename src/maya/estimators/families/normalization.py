"""Layer / RMS / batch normalisation over rows of `row` elements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, inductor_kernels
from .rowwise import rows, rowwise_features

FORWARD_FLOPS, BACKWARD_FLOPS = 5, 8
"""FLOPs per element: mean, variance, scale and shift; the backward's two extra reductions."""
STATS_BYTES = 8
"""Per row, the fp32 mean and reciprocal standard deviation saved for the backward."""


class NormalizationPredictor(FamilyPredictor):
    family = "normalization"
    ops = (
        "ln",
        "layer_norm",
        "layer_norm_fwd",
        "layer_norm_bwd",
        "rms_norm_fwd",
        "rms_norm_bwd",
        "batch_norm",
        "group_norm",
        "native_layer_norm",
        "native_layer_norm_backward",
        "_fused_rms_norm",
        "_fused_rms_norm_backward",
        "vllm_rms_norm",
    )
    """Profiler and NeuSight names, then the aten ops traced kernels carry (`maya.simulator.work`), then vLLM's
    RMSNorm kernel (Vidur's rows, `vidur_data`)."""
    same_kernel = {
        "ln": "native_layer_norm",
        "layer_norm": "native_layer_norm",
        "layer_norm_fwd": "native_layer_norm",
        "layer_norm_bwd": "native_layer_norm_backward",
        "rms_norm_fwd": "native_layer_norm",
        "rms_norm_bwd": "native_layer_norm_backward",
        "_fused_rms_norm": "native_layer_norm",
        "_fused_rms_norm_backward": "native_layer_norm_backward",
        **inductor_kernels(
            "native_layer_norm", "native_layer_norm_backward", kinds=("reduction", "persistent_reduction")
        ),
    }
    """NeuSight's `ln` times `F.layer_norm`, torch's layer-norm kernel; torch's fused RMSNorm
    (`aten::_fused_rms_norm`, `F.rms_norm`) runs the same vectorized kernel with the mean left out; the profiler's
    names are its configs'; Inductor's fused layer and RMS norm reductions as torch's layer-norm kernels of the same
    work."""

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel, row = calls["numel"].to_numpy(), calls["row"].fillna(calls["numel"]).to_numpy()
        backward = calls["op"].str.contains("bwd|backward").to_numpy()
        # forward: x in, y out; backward: x and dy in, dx out; plus the weights and per-row statistics
        tensors = np.where(backward, 3.0, 2.0)
        traffic = itemsize * (tensors * numel + 2 * row) + STATS_BYTES * rows(calls)
        return Work(flops=numel * np.where(backward, BACKWARD_FLOPS, FORWARD_FLOPS), bytes=traffic)

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        return rowwise_features(calls, hw)
