"""Raw collective measurements → validated rows in the warehouse (`collective_measurements`,
`collective_quarantine`), partitioned by network and campaign: data for the collective model to be fitted
and judged on (`maya.estimators.vidur_data.check_collectives` is the schema).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place (`maya.pipelines.landing`).
"""

import io

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from maya.estimators.vidur_data import VidurFormatError, check_collectives

from ..landing import COLLECTIVE_TABLES, FileCheck, PartitionRows, quarantined, unreadable
from ..partitions import collective_partitions, network_partition_of
from ..resources import DataSources, Warehouse
from ..sources import NetworkPartition, ProfileFile, network_files

MEASUREMENT_COLUMNS = ("row_index", "collective", "bytes", "ranks", "nodes", "devices_per_node", "measured_ns")


@dg.asset(partitions_def=collective_partitions, group_name="collectives", kinds={"parquet", "duckdb"})
def raw_collective_measurements(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's collective-measurement files as they landed, with their SHA-256 (`collective_files`)."""
    partition = network_partition_of(context)
    rows = PartitionRows(warehouse, COLLECTIVE_TABLES, partition.network, partition.campaign)
    return rows.land(network_files(data, partition)).result("files", "content_hash", "changed")


@dg.asset(
    partitions_def=collective_partitions, deps=[raw_collective_measurements], group_name="collectives", kinds={"duckdb"}
)
def validated_collective_measurements(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's collective rows that pass validation (`collective_measurements`); rejected rows and
    unreadable files go to `collective_quarantine` with the reason, and the rest of the partition goes on."""
    partition = network_partition_of(context)
    rows = PartitionRows(warehouse, COLLECTIVE_TABLES, partition.network, partition.campaign)
    validated = rows.validate(
        context, partition, network_files(data, partition), lambda file, raw: _validate_file(file, raw, partition)
    )
    return validated.result("changed", "content_hash", "rows", "quarantined", "quarantine_reasons")


def _validate_file(file: ProfileFile, raw: bytes, partition: NetworkPartition) -> FileCheck:
    """Valid rows and quarantine rows of the partition's network in one file; an unreadable file is one
    quarantine row without `row_index`."""
    path = str(file.path)
    try:
        try:
            arrow = pq.read_table(io.BytesIO(raw))
            arrow.validate(full=True)  # text that is not UTF-8 fails here, not later as a bare ArrowException
            table = arrow.to_pandas()
        except (pa.ArrowException, OSError, KeyError, TypeError) as e:  # a damaged file or pandas metadata
            raise VidurFormatError(f"not a readable Parquet file: {e}") from None
        if "network" not in table.columns:
            raise VidurFormatError("missing column network: not Vidur's collectives layout")
        mine = table[table["network"].astype(str) == partition.network]
        checked = check_collectives(mine.reset_index(drop=True))
    except (VidurFormatError, ValueError) as e:
        return FileCheck(None, unreadable(path, e))
    in_file = mine.index.to_numpy()  # row positions in the file
    valid = checked.calls[list(MEASUREMENT_COLUMNS)].assign(
        row_index=in_file[checked.calls["row_index"].to_numpy()], path=path
    )
    bad = checked.rejected
    return FileCheck(valid, quarantined(path, in_file[bad["row_index"].to_numpy()].astype("int64"), bad))
