"""The learned models' inputs: roofline position (shared by every family), the family's shape
features and, for the model of seen hardware, the spec-sheet figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .families.base import FamilyPredictor, Work, log2
from .hardware_table import HardwareArrays
from .launch_floor import DEVICE_FLOOR_S


def roofline_features(work: Work, hw: HardwareArrays) -> dict[str, np.ndarray]:
    """Where the call sits against the GPU's roofline: absolute size, size relative to the device floor,
    arithmetic intensity relative to the ridge point (> 0: compute bound), footprint relative to L2."""
    ridge = hw.peak_flops / hw.bandwidth
    roofline_s = work.roofline_s(hw)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = work.flops / work.bytes
    return {
        "log2_roofline_over_floor": log2(roofline_s / DEVICE_FLOOR_S),
        "log2_flops": log2(work.flops),
        "log2_bytes": log2(work.bytes),
        "log2_intensity_over_ridge": log2(intensity / ridge),
        "log2_bytes_over_l2": log2(work.bytes / hw.l2_bytes),
    }


def hardware_features(hw: HardwareArrays) -> dict[str, np.ndarray]:
    """Spec-sheet figures: they let one model tell seen GPUs apart, so it is not used for unseen ones."""
    return {
        "log2_peak_flops": np.log2(hw.peak_flops),
        "log2_bandwidth": np.log2(hw.bandwidth),
        "sm_count": hw.sm_count,
        "log2_l2_bytes": np.log2(hw.l2_bytes),
    }


BLOCK_ROWS = 16384
"""Rows assembled at a time by `Features.select`: the block stays in cache while its columns are written."""


@dataclass(frozen=True)
class Features:
    """One float64 column per named feature; NaN means missing."""

    names: tuple[str, ...]
    columns: tuple[np.ndarray, ...]

    @property
    def matrix(self) -> np.ndarray:
        """Every column, as one float64 matrix."""
        return np.column_stack(self.columns)

    def select(self, names: tuple[str, ...], rows: np.ndarray | None = None) -> np.ndarray:
        """The columns `names`, in that order, of the chosen rows (indices; all by default), as float32: what
        XGBoost converts its input to, so its predictions are those of the float64 values."""
        columns = [self.columns[self.names.index(n)] for n in names]
        size = len(self.columns[0]) if rows is None else len(rows)
        matrix = np.empty((size, len(columns)), dtype="float32")
        for start in range(0, size, BLOCK_ROWS):
            block = slice(start, start + BLOCK_ROWS)
            chosen = block if rows is None else rows[block]
            for i, column in enumerate(columns):
                matrix[block, i] = column[chosen]
        return matrix

    def without(self, names: list[str]) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in names)


def features_of(
    predictor: FamilyPredictor, calls: pd.DataFrame, hw: HardwareArrays, work: Work, *, with_hardware: bool
) -> Features:
    """Every feature of `calls` (all of one family)."""
    columns = {
        "op_code": predictor.op_codes(calls),
        **roofline_features(work, hw),
        **predictor.shape_features(calls, hw),
    }
    if with_hardware:
        columns.update(hardware_features(hw))
    return Features(tuple(columns), tuple(np.asarray(values, dtype="float64") for values in columns.values()))
