"""Softmax and log-softmax over rows of `row` elements."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .family_base import FamilyPredictor, Work
from .family_rowwise import rowwise_features
from .hardware_table import HardwareArrays

FLOPS_PER_ELEMENT = 5
"""Max, subtract, exponential, sum, divide."""


class SoftmaxPredictor(FamilyPredictor):
    family = "softmax"
    ops = ("softmax", "log_softmax", "softmax_fwd", "softmax_bwd")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        backward = calls["op"].str.contains("bwd|backward").to_numpy()
        # forward: x in, y out; backward: y and dy in, dx out
        return Work(flops=FLOPS_PER_ELEMENT * numel, bytes=itemsize * numel * np.where(backward, 3.0, 2.0))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        return rowwise_features(calls, hw)
