"""Exact lookup: measured durations of shapes seen in training (same hardware, family, op, dtype and
shape), with the spread of repeated measurements when there were several."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from .calls import KEY_COLUMNS


def shape_keys(calls: pd.DataFrame) -> np.ndarray:
    """A 64-bit hash of each call's identifying columns (hardware as catalog name)."""
    return pd.util.hash_pandas_object(calls[list(KEY_COLUMNS)], index=False).to_numpy()


class MeasuredShapes:
    """Median, 10th and 90th percentile of the measured nanoseconds per shape key."""

    def __init__(self, table: pd.DataFrame):
        self.table = table

    @classmethod
    def from_measurements(cls, calls: pd.DataFrame, measured_ns: np.ndarray) -> MeasuredShapes:
        grouped = pd.Series(measured_ns, index=shape_keys(calls)).groupby(level=0)
        table = pd.DataFrame(
            {
                "median_ns": grouped.median(),
                "p10_ns": grouped.quantile(0.1),
                "p90_ns": grouped.quantile(0.9),
                "count": grouped.size(),
            }
        )
        return cls(table.rename_axis("key"))

    def __len__(self) -> int:
        return len(self.table)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Median, 10th and 90th percentile ns per shape key (NaN where never measured)."""
        rows = self.table.index.get_indexer(keys)
        hit = rows >= 0
        columns = []
        for name in ("median_ns", "p10_ns", "p90_ns"):
            values = np.full(len(keys), np.nan)
            values[hit] = self.table[name].to_numpy()[rows[hit]]
            columns.append(values)
        return columns[0], columns[1], columns[2]

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.table.reset_index().to_parquet(buffer, index=False)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> MeasuredShapes:
        table = pd.read_parquet(io.BytesIO(raw))
        return cls(table.set_index("key"))
