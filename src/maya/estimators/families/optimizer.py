"""Optimizer steps (fused / foreach AdamW, SGD) over `numel` parameters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, log2
from .rowwise import THREADS_PER_SM

ADAM_TENSOR_PASSES, ADAM_FLOPS = 7, 12
"""AdamW reads parameter, gradient and both moments and writes parameter and moments; ~12 FLOPs each."""
SGD_TENSOR_PASSES, SGD_FLOPS = 3, 2


class OptimizerPredictor(FamilyPredictor):
    """Optimizer steps as the profiler measures them (`adamw_fused`, `adamw_foreach` over `numel` parameters).

    In a predicted trace it prices only the `optimizer`-family kernels `simulator.multi_tensor` leaves unsized (a
    launch without a grid, or a name that does not say its lists): the sized ones are framed as elementwise adds."""

    family = "optimizer"
    ops = ("adamw_fused", "adamw_foreach", "adam", "adamw", "sgd")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        sgd = (calls["op"] == "sgd").to_numpy()
        passes = np.where(sgd, SGD_TENSOR_PASSES, ADAM_TENSOR_PASSES)
        return Work(flops=numel * np.where(sgd, SGD_FLOPS, ADAM_FLOPS), bytes=itemsize * numel * passes)

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        numel = calls["numel"].to_numpy()
        return {"log2_numel": log2(numel), "log2_thread_waves": log2(numel / (hw.sm_count * THREADS_PER_SM))}
