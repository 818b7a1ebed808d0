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
| `estimator_evaluations` | estimator version evaluated at an inputs hash: overall errors |
| `kernel_errors` | version x hardware x family: held-out kernel MAPE (NeuSight's test split) |
| `kernel_predictions` | version x held-out kernel: measured and predicted ns |
| `workload_predictions` | version x ground-truth workload: measured and predicted iteration time |

Every write replaces a partition's or a version's rows inside one transaction.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa

from maya.estimators.calls import NUMERIC_COLUMNS

PARTITION = "hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL"
NETWORK = "network VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS profile_files (
    {PARTITION}, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL,
    PRIMARY KEY (hardware, campaign, path));
CREATE TABLE IF NOT EXISTS profile_partitions (
    hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, files INTEGER NOT NULL,
    rows BIGINT NOT NULL, quarantined BIGINT NOT NULL, PRIMARY KEY (hardware, campaign));
CREATE TABLE IF NOT EXISTS kernel_profiles (
    {PARTITION}, row_index BIGINT NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL, dtype VARCHAR NOT NULL,
    batch DOUBLE, m DOUBLE, n DOUBLE, k DOUBLE, numel DOUBLE, "row" DOUBLE, operands DOUBLE, bytes DOUBLE,
    flops DOUBLE, measured_ns DOUBLE NOT NULL, timing VARCHAR NOT NULL DEFAULT 'device');
CREATE TABLE IF NOT EXISTS quarantine (
    {PARTITION}, row_index BIGINT, reason VARCHAR NOT NULL, record JSON);
CREATE TABLE IF NOT EXISTS collective_files (
    {NETWORK}, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL,
    PRIMARY KEY (network, campaign, path));
CREATE TABLE IF NOT EXISTS collective_partitions (
    network VARCHAR NOT NULL, campaign VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, files INTEGER NOT NULL,
    rows BIGINT NOT NULL, quarantined BIGINT NOT NULL, PRIMARY KEY (network, campaign));
CREATE TABLE IF NOT EXISTS collective_measurements (
    {NETWORK}, row_index BIGINT NOT NULL, collective VARCHAR NOT NULL, bytes DOUBLE NOT NULL, ranks INTEGER NOT NULL,
    nodes INTEGER NOT NULL, devices_per_node INTEGER NOT NULL, measured_ns DOUBLE NOT NULL);
CREATE TABLE IF NOT EXISTS collective_quarantine (
    {NETWORK}, row_index BIGINT, reason VARCHAR NOT NULL, record JSON);
CREATE TABLE IF NOT EXISTS estimator_evaluations (
    version VARCHAR NOT NULL, inputs_hash VARCHAR NOT NULL, kernel_rows BIGINT NOT NULL, kernel_mape DOUBLE,
    workloads INTEGER NOT NULL, workload_failures INTEGER NOT NULL, workload_mape DOUBLE,
    PRIMARY KEY (version));
CREATE TABLE IF NOT EXISTS kernel_errors (
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, family VARCHAR NOT NULL, rows BIGINT NOT NULL,
    mape DOUBLE NOT NULL);
CREATE TABLE IF NOT EXISTS kernel_predictions (
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL,
    method VARCHAR NOT NULL, measured_ns DOUBLE NOT NULL, predicted_ns DOUBLE NOT NULL);
CREATE TABLE IF NOT EXISTS workload_predictions (
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, workload VARCHAR NOT NULL, measured_ns DOUBLE NOT NULL,
    predicted_ns DOUBLE, error VARCHAR);
"""
CALL_COLUMNS = ("family", "op", "dtype", *NUMERIC_COLUMNS)
"""The call-frame columns `kernel_profiles` keeps (its `hardware` is the partition's)."""


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring tables written by an older Maya up to `SCHEMA`, in one transaction: `kernel_profiles` without
    `timing` gets it, NeuSight's rows marked as timed call by call (`isolated`)."""
    columns = {
        name
        for (name,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'kernel_profiles'"
        ).fetchall()
    }
    if "timing" in columns:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("ALTER TABLE kernel_profiles ADD COLUMN timing VARCHAR NOT NULL DEFAULT 'device'")
        con.execute(
            "UPDATE kernel_profiles SET timing = 'isolated' WHERE (hardware, campaign, path) IN "
            "(SELECT hardware, campaign, path FROM profile_files WHERE format = 'neusight')"
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


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
