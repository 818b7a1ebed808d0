"""One raw profile file of a partition as measured calls: `hardware` (the GPU the rows say they were
measured on), the call-frame columns, `measured_ns`, its `timing` (NeuSight timed calls one by one,
`isolated`; Maya's campaigns and Vidur time the device, `device`) and `row_index` (the row in the file). A
file that cannot be read in its format raises `ProfileFileError` with the reason; nothing is dropped
silently: rows the file holds but that are not measurements are counted by kind, and rows a source's own
schema rejects (Vidur's, `maya.estimators.vidur_data`) come back with their reason for the quarantine."""

from __future__ import annotations

import io

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from maya.estimators.calls import NUMERIC_COLUMNS
from maya.estimators.launch_floor import DEVICE
from maya.estimators.neusight_data import FAMILY_OF_OP, to_calls
from maya.estimators.vidur_data import check_compute
from maya.profiler.kernels.measurements import MEASUREMENTS_VERSION, VERSION_KEY

from .measurement_calls import measurement_calls
from .sources import NEUSIGHT, VIDUR_COMPUTE, Partition, catalog_name
from .tables import CALL_COLUMNS

MEASUREMENT_COLUMNS = ("op", "dtype", "status", "median_ns")
"""What a measurements file needs at least (absent shape columns get its rows rejected instead)."""


class ProfileFileError(Exception):
    """The file is unreadable or not in its format."""


def read_profile(
    data: bytes, file_format: str, partition: Partition
) -> tuple[pd.DataFrame, dict[str, int], pd.DataFrame]:
    """The partition's measured calls in the file's bytes, the rows left out (by kind) and the rows rejected
    before they became calls (`row_index`, `reason`, `record`)."""
    try:
        table = pq.read_table(io.BytesIO(data))
        table.validate(full=True)  # text that is not UTF-8 fails here, not later as a bare ArrowException
    except (pa.ArrowException, OSError) as e:
        raise ProfileFileError(f"not a readable Parquet file: {e}") from None
    read = {NEUSIGHT: _neusight, VIDUR_COMPUTE: _vidur_compute}.get(file_format, _measurements)
    try:
        result = read(table, partition)
    except (ValueError, TypeError) as e:  # a column that does not convert (NeuSightFormatError included)
        raise ProfileFileError(str(e)) from None
    return result if len(result) == 3 else (*result, _NO_REJECTS)


def _pandas(table: pa.Table) -> pd.DataFrame:
    """The table as a frame; damaged pandas metadata (pandas raises KeyError or TypeError) is a bad file."""
    try:
        return table.to_pandas()
    except (KeyError, TypeError, ValueError) as e:
        raise ProfileFileError(f"damaged pandas metadata ({type(e).__name__}: {e})") from None


_NO_REJECTS = pd.DataFrame(
    {"row_index": pd.Series(dtype="int64"), "reason": pd.Series(dtype="str"), "record": pd.Series(dtype="str")}
)


def _vidur_compute(table: pa.Table, partition: Partition) -> tuple[pd.DataFrame, dict[str, int], pd.DataFrame]:
    """The partition's device's rows of Vidur's compute profiles, checked by `vidur_data.COMPUTE_SCHEMA`."""
    raw = _pandas(table)
    if "device" not in raw.columns:
        raise ProfileFileError("missing column device: not Vidur's compute layout")
    names = raw["device"].astype(str)
    mine = raw[names.map({d: catalog_name(d) for d in names.unique()}) == partition.hardware]
    checked = check_compute(mine.reset_index(drop=True))
    in_file = mine.index.to_numpy()  # the checked frames count rows of `mine`; the quarantine counts the file's
    calls = checked.calls.assign(hardware=partition.hardware)
    rejected = checked.rejected
    records = rejected.drop(columns=["reason", "row_index"]).to_json(orient="records", lines=True).split("\n")
    quarantined = pd.DataFrame(
        {
            "row_index": in_file[rejected["row_index"].to_numpy()].astype("int64"),
            "reason": rejected["reason"].to_numpy(),
            "record": records[: len(rejected)],
        }
    )
    return _frame(calls, pd.Index(in_file[checked.calls["row_index"].to_numpy()])), checked.left_out, quarantined


def _neusight(table: pa.Table, partition: Partition) -> tuple[pd.DataFrame, dict[str, int]]:
    raw = _pandas(table)
    if "device" not in raw.columns or "op" not in raw.columns:
        raise ProfileFileError("missing column(s) op, device: not NeuSight's kernel format")
    names = raw["device"].astype(str)
    here = raw[names.map({d: catalog_name(d) for d in names.unique()}) == partition.hardware]
    mine = here[here["op"].isin(list(FAMILY_OF_OP))]
    calls = to_calls(mine).assign(hardware=partition.hardware) if len(mine) else pd.DataFrame()
    left_out = {
        "rows of ops Maya does not model": len(here) - len(mine),
        "rows without a device name (no partition's)": int(raw["device"].isna().sum()),
    }
    return _frame(calls, mine.index), {kind: n for kind, n in left_out.items() if n}


def _measurements(table: pa.Table, partition: Partition) -> tuple[pd.DataFrame, dict[str, int]]:
    version = (table.schema.metadata or {}).get(VERSION_KEY)
    if version is not None and version != MEASUREMENTS_VERSION.encode():
        raise ProfileFileError(
            f"measurements version {version.decode(errors='replace')!r}; this Maya reads version {MEASUREMENTS_VERSION}"
        )
    rows = _pandas(table)
    missing = [c for c in MEASUREMENT_COLUMNS if c not in rows.columns]
    if missing:
        raise ProfileFileError(f"missing column(s) {', '.join(missing)}: not a kernel-campaign measurements file")
    measured = rows[rows["status"] == "ok"]
    declared = pd.Series(partition.hardware, index=measured.index, dtype="str")
    for column in ("device_name", "hardware"):  # the explicit catalog name wins over the device's name
        if column in measured.columns:
            declared = measured[column].astype("str").where(measured[column].notna(), declared)
    calls = measurement_calls(measured).assign(
        hardware=declared.map({d: catalog_name(d) for d in declared.unique()}), timing=DEVICE
    )
    left_out = rows.loc[rows["status"] != "ok", "status"].value_counts()
    return _frame(calls, measured.index), {f"configs with status {s}": int(n) for s, n in left_out.items()}


def _frame(calls: pd.DataFrame, index: pd.Index) -> pd.DataFrame:
    """The columns the profile schema reads, typed as it checks them whatever the file held (none: an empty
    frame of those types)."""
    frame = calls.reindex(columns=["hardware", *CALL_COLUMNS, "measured_ns", "timing"])
    numeric = [*NUMERIC_COLUMNS, "measured_ns"]
    frame[numeric] = frame[numeric].astype("float64")
    for text in ("hardware", "family", "op", "dtype", "timing"):
        frame[text] = frame[text].astype("str")
    frame["row_index"] = index.to_numpy(dtype="int64")
    return frame.reset_index(drop=True)
