"""Kernels of no known family: priced by their explicit work, else as one pass over `numel` elements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, log2


class OtherPredictor(FamilyPredictor):
    family = "other"

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        return Work(flops=numel, bytes=2 * itemsize * numel)

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        return {"log2_numel": log2(calls["numel"].to_numpy())}
