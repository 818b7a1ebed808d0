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

from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES, MATRIX_FAMILIES

from maya.core import hardware
from maya.estimators.calls import NUMERIC_COLUMNS
from maya.estimators.launch_floor import DEVICE, ISOLATED


def _shape_given(frame: pd.DataFrame) -> pd.Series:
    matrix = frame["family"].isin(MATRIX_FAMILIES)
    copy = frame["family"] == "copy"
    return (matrix & frame[["m", "n", "k"]].notna().all(axis=1)) | (copy & frame["bytes"].notna()) \
        | (~matrix & frame["numel"].notna())


@lru_cache(maxsize=64)
def profile_schema(partition_hardware: str) -> pa.DataFrameSchema:
    sizes = {c: pa.Column("float64", pa.Check.gt(0), nullable=True) for c in NUMERIC_COLUMNS}
    filed_under = pa.Check.eq(partition_hardware, error=f"not the partition's {partition_hardware}")
    return pa.DataFrameSchema({
        "hardware": pa.Column(str, [pa.Check.isin(hardware.names(), error="not in the hardware catalog"), filed_under]),
        "family": pa.Column(str, pa.Check.isin(KERNEL_FAMILIES, error=f"not a kernel family ({', '.join(KERNEL_FAMILIES)})")),
        "op": pa.Column(str),
        "dtype": pa.Column(str, pa.Check.isin(list(DTYPE_BYTES), error="not a known dtype")),
        **sizes,
        "measured_ns": pa.Column("float64", [pa.Check.gt(0), pa.Check(np.isfinite, error="not finite")]),
        "timing": pa.Column(str, pa.Check.isin([DEVICE, ISOLATED], error=f"not a timing ({DEVICE}, {ISOLATED})")),
        "row_index": pa.Column("int64"),
    }, checks=[pa.Check(_shape_given, error="the family's shape columns are missing")], strict=True, ordered=True)


def split_valid(frame: pd.DataFrame, partition_hardware: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid rows, rejected rows with a `reason` column)."""
    try:
        profile_schema(partition_hardware).validate(frame, lazy=True)
    except pa.errors.SchemaErrors as e:
        if e.failure_cases["index"].isna().any():  # the frame's columns, not a row: a reader's bug
            raise
        reasons = _reasons(e.failure_cases)
    else:
        return frame, frame.iloc[:0].assign(reason=pd.Series(dtype="str"))
    rejected = frame.index.isin(reasons.index)
    return frame[~rejected].reset_index(drop=True), frame[rejected].join(reasons).reset_index(drop=True)


def _reasons(failures: pd.DataFrame) -> pd.Series:
    """One text per failing row: `column: check (value)` items, or the table check's message."""
    check = failures["check"].astype(str).str.replace("not_nullable", "required")
    value = failures["failure_case"].map(lambda v: "missing" if v is None or v != v else repr(v))
    column_level = (failures["schema_context"] == "Column").to_numpy()
    text = np.where(column_level, failures["column"].astype(str) + ": " + check + " (" + value + ")", check)
    items = pd.DataFrame({"index": failures["index"].astype("int64"), "text": text}).drop_duplicates()
    return items.groupby("index")["text"].agg("; ".join).rename("reason")
