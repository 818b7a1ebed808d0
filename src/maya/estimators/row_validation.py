"""Row-by-row validation with pandera: the rows a schema accepts, and the others with their reasons."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa


def split_valid(frame: pd.DataFrame, schema: pa.DataFrameSchema) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid rows, rejected rows with a `reason` column), both with fresh indexes. A failure that is not
    about rows (a missing column, a column of the wrong type) raises pandera's `SchemaErrors`."""
    try:
        schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as e:
        if e.failure_cases["index"].isna().any():
            raise
        found = reasons(e.failure_cases)
    else:
        return frame.reset_index(drop=True), frame.iloc[:0].assign(reason=pd.Series(dtype="str"))
    rejected = frame.index.isin(found.index)
    return frame[~rejected].reset_index(drop=True), frame[rejected].join(found).reset_index(drop=True)


def reasons(failures: pd.DataFrame) -> pd.Series:
    """One text per failing row: `column: check (value)` items, or the table check's message."""
    check = failures["check"].astype(str).str.replace("not_nullable", "required")
    value = failures["failure_case"].map(lambda v: "missing" if v is None or v != v else repr(v))
    column_level = (failures["schema_context"] == "Column").to_numpy()
    text = np.where(column_level, failures["column"].astype(str) + ": " + check + " (" + value + ")", check)
    items = pd.DataFrame({"index": failures["index"].astype("int64"), "text": text}).drop_duplicates()
    if not items["index"].duplicated().any():  # one failure per row: no joining (fast for many rows)
        return pd.Series(items["text"].to_numpy(), index=items["index"].to_numpy(), name="reason")
    return items.groupby("index")["text"].agg("; ".join).rename("reason")
