"""Shape features shared by the families that work row by row (softmax, normalization,
reduction, embedding): rows of `row` elements, `numel` elements in all."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import alignment_bits, log2

THREADS_PER_SM = 2048
"""Resident threads per SM on every GPU since Kepler except Turing/Ada (1024/1536): a wave size."""


def rows(calls: pd.DataFrame) -> np.ndarray:
    return (calls["numel"] / calls["row"].fillna(calls["numel"])).to_numpy()


def rowwise_features(calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
    numel = calls["numel"].to_numpy()
    n_rows = rows(calls)
    return {
        "log2_numel": log2(numel),
        "log2_row": log2(calls["row"].to_numpy()),
        "log2_rows": log2(n_rows),
        "log2_rows_per_sm": log2(n_rows / hw.sm_count),
        "log2_thread_waves": log2(numel / (hw.sm_count * THREADS_PER_SM)),
        "row_alignment": alignment_bits(calls["row"].to_numpy()),
    }
