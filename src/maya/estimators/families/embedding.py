"""Embedding lookups (gathers of rows of `row` elements) and their scatter-add backward."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work
from .rowwise import rows, rowwise_features

INDEX_BYTES = 8
"""int64 token ids."""


class EmbeddingPredictor(FamilyPredictor):
    family = "embedding"
    ops = ("embedding", "embedding_fwd", "embedding_bwd", "index_select", "gather", "scatter_add")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        backward = calls["op"].str.contains("bwd|backward|scatter").to_numpy()
        # forward: gather rows, write them; backward: read gradients, read-modify-write the table rows
        traffic = itemsize * numel * np.where(backward, 3.0, 2.0) + INDEX_BYTES * rows(calls)
        return Work(flops=np.where(backward, numel, 0.0), bytes=traffic)

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        return rowwise_features(calls, hw)
