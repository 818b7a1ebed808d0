"""Reductions over the last dimension (sum, mean, max, norms, losses): `numel` in, `numel / row` out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, inductor_kernels
from .rowwise import rows, rowwise_features


class ReductionPredictor(FamilyPredictor):
    family = "reduction"
    ops = ("sum", "mean", "max", "amax", "min", "norm", "var", "cross_entropy_fwd", "cross_entropy_bwd")
    same_kernel = inductor_kernels("sum", kinds=("reduction", "persistent_reduction"))
    """Inductor's reductions as torch's sum of the same work."""

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        return Work(flops=numel, bytes=itemsize * (numel + rows(calls)))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        return rowwise_features(calls, hw)
