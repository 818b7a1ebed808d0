"""Raw kernel profiles → validated measured calls in the warehouse (`kernel_profiles`, `quarantine`).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place (`maya.pipelines.landing`).
"""

import dagster as dg

from ..landing import PROFILE_TABLES, FileCheck, PartitionRows, concat, quarantined, unreadable
from ..partitions import partition_of, profile_partitions
from ..profile_readers import ProfileFileError, read_profile
from ..profile_schema import split_valid
from ..resources import DataSources, Warehouse
from ..sources import Partition, ProfileFile, partition_files


@dg.asset(partitions_def=profile_partitions, group_name="profiles", kinds={"parquet", "duckdb"})
def raw_kernel_profiles(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's profile files as they landed, with their SHA-256 (table `profile_files`)."""
    partition = partition_of(context)
    rows = PartitionRows(warehouse, PROFILE_TABLES, partition.hardware, partition.campaign)
    return rows.land(partition_files(data, partition)).result("files", "bytes", "content_hash", "changed")


@dg.asset(partitions_def=profile_partitions, deps=[raw_kernel_profiles], group_name="profiles", kinds={"duckdb"})
def validated_kernel_profiles(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's measured calls that pass validation (`kernel_profiles`); rejected rows and
    unreadable files go to `quarantine` with the reason, and the rest of the partition goes on."""
    partition = partition_of(context)
    rows = PartitionRows(warehouse, PROFILE_TABLES, partition.hardware, partition.campaign)
    validated = rows.validate(
        context, partition, partition_files(data, partition), lambda file, raw: _validate_file(file, raw, partition)
    )
    return validated.result("changed", "content_hash", "files", "rows", "quarantined", "quarantine_reasons", "left_out")


def _validate_file(file: ProfileFile, raw: bytes, partition: Partition) -> FileCheck:
    """Valid rows, quarantine rows and rows left out (by kind) of one file; an unreadable file is one
    quarantine row without `row_index`."""
    path = str(file.path)
    try:
        frame, skipped, refused = read_profile(raw, file.format, partition)
    except ProfileFileError as e:
        return FileCheck(None, unreadable(path, e))
    valid, rejected = split_valid(frame, partition.hardware)
    bad = quarantined(path, rejected["row_index"], rejected)
    return FileCheck(valid.assign(path=path), concat([refused.assign(path=path), bad]), skipped)
