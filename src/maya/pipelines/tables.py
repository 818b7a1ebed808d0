"""The warehouse tables the pipelines write (next to `runs` and the estimator registry's tables).

| table | one row per |
|---|---|
| `profile_files` | raw profile file of a (hardware, campaign) partition, with its SHA-256 |
| `profile_partitions` | validated partition: the content hash it was validated at, row counts |
| `kernel_profiles` | valid measured kernel call (call-frame columns, `timing`, `measured_ns`) |
| `quarantine` | rejected row (`row_index`) or unreadable file (`row_index` NULL), with the reason |
| `collective_files` | raw collective-measurement file of a (network, campaign) partition, with its SHA-256 |
| `collective_partitions` | validated collective partition: the content hash it was validated at, row counts |
| `collective_measurements` | valid measured collective (Maya's collective name, bytes per GPU, ranks, nodes, `measured_ns`) |
| `collective_quarantine` | rejected collective row or unreadable file, with the reason |
| `public_kernel_files` | shipped public kernel-measurement file (`data/kernels_public/`, one partition each), with its SHA-256 |
| `public_kernel_partitions` | validated public kernel partition: the content hash it was validated at, row counts |
| `public_kernels` | valid public kernel measurement (device, implementation, direction, shape, `time_s`, provenance) |
| `public_kernel_quarantine` | rejected public kernel row or unreadable file, with the reason |
| `estimator_evaluations` | estimator version evaluated at an inputs hash: overall errors |
| `kernel_errors` | version x hardware x family: held-out kernel MAPE (NeuSight's test split) |
| `kernel_predictions` | version x held-out kernel: measured and predicted ns |
| `workload_predictions` | version x ground-truth workload: measured and predicted iteration time |

Every write replaces a partition's or a version's rows inside one transaction. Their DDL, with every other
warehouse table's, and the migrations of older layouts are in `maya.core.warehouse_schema`.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa

from maya.estimators.calls import NUMERIC_COLUMNS

CALL_COLUMNS = ("family", "op", "dtype", *NUMERIC_COLUMNS)
"""The call-frame columns `kernel_profiles` keeps (its `hardware` is the partition's)."""


def insert(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> None:
    """Append `frame` (columns named as the table's; NaN stored as NULL) to `table`."""
    if frame.empty:
        return
    con.register("_incoming", pa.Table.from_pandas(frame, preserve_index=False))
    try:
        columns = ", ".join(f'"{c}"' for c in frame.columns)
        con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM _incoming")
    finally:
        con.unregister("_incoming")


def delete_partition(
    con: duckdb.DuckDBPyConnection, table: str, hardware: str, campaign: str, *, key: str = "hardware"
) -> None:
    """Delete a partition's rows; `key` names the first partition column (`network` for collectives)."""
    con.execute(f"DELETE FROM {table} WHERE {key} = ? AND campaign = ?", [hardware, campaign])
