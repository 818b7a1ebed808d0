"""Row validation of measured kernel calls with pandera: what the estimators can train on.

A row is valid when its hardware is in the catalog and is the partition's, its family and dtype are
known, its shape sizes are positive, the family's shape is given, and `measured_ns` is a finite
positive number. Every other row is rejected with the reasons it failed.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import pandera.pandas as pa

from maya.core import hardware
from maya.estimators import row_validation
from maya.estimators.calls import NUMERIC_COLUMNS
from maya.estimators.launch_floor import DEVICE, ISOLATED
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES, MATRIX_FAMILIES


def _shape_given(frame: pd.DataFrame) -> pd.Series:
    matrix = frame["family"].isin(MATRIX_FAMILIES)
    copy = frame["family"] == "copy"
    return (
        (matrix & frame[["m", "n", "k"]].notna().all(axis=1))
        | (copy & frame["bytes"].notna())
        | (~matrix & frame["numel"].notna())
    )


@lru_cache(maxsize=64)
def profile_schema(partition_hardware: str) -> pa.DataFrameSchema:
    sizes = {c: pa.Column("float64", pa.Check.gt(0), nullable=True) for c in NUMERIC_COLUMNS}
    filed_under = pa.Check.eq(partition_hardware, error=f"not the partition's {partition_hardware}")
    return pa.DataFrameSchema(
        {
            "hardware": pa.Column(
                str, [pa.Check.isin(hardware.names(), error="not in the hardware catalog"), filed_under]
            ),
            "family": pa.Column(
                str, pa.Check.isin(KERNEL_FAMILIES, error=f"not a kernel family ({', '.join(KERNEL_FAMILIES)})")
            ),
            "op": pa.Column(str),
            "dtype": pa.Column(str, pa.Check.isin(list(DTYPE_BYTES), error="not a known dtype")),
            **sizes,
            "measured_ns": pa.Column("float64", [pa.Check.gt(0), pa.Check(np.isfinite, error="not finite")]),
            "timing": pa.Column(str, pa.Check.isin([DEVICE, ISOLATED], error=f"not a timing ({DEVICE}, {ISOLATED})")),
            "row_index": pa.Column("int64"),
        },
        checks=[pa.Check(_shape_given, error="the family's shape columns are missing")],
        strict=True,
        ordered=True,
    )


def split_valid(frame: pd.DataFrame, partition_hardware: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid rows, rejected rows with a `reason` column)."""
    return row_validation.split_valid(frame, profile_schema(partition_hardware))
