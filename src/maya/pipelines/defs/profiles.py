"""Raw kernel profiles → validated measured calls in the warehouse (`kernel_profiles`, `quarantine`).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place (`maya.pipelines.landing`).
"""

from collections import Counter

import dagster as dg
import pandas as pd

from ..landing import (
    PROFILE_TABLES,
    PartitionRows,
    concat,
    quarantine_reasons,
    quarantined,
    read_files,
    unchanged,
    unreadable,
)
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
    landed = PartitionRows(warehouse, PROFILE_TABLES, partition.hardware, partition.campaign).land(
        partition_files(data, partition)
    )
    return dg.MaterializeResult(
        metadata={
            "files": landed.files,
            "bytes": landed.bytes,
            "content_hash": landed.content_hash,
            "changed": landed.changed,
        },
        data_version=dg.DataVersion(landed.content_hash),
    )


@dg.asset(partitions_def=profile_partitions, deps=[raw_kernel_profiles], group_name="profiles", kinds={"duckdb"})
def validated_kernel_profiles(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's measured calls that pass validation (`kernel_profiles`); rejected rows and
    unreadable files go to `quarantine` with the reason, and the rest of the partition goes on."""
    partition = partition_of(context)
    rows = PartitionRows(warehouse, PROFILE_TABLES, partition.hardware, partition.campaign)
    contents, digest = read_files(partition_files(data, partition))
    if rows.validated_hash() == digest:
        return unchanged(context, partition, digest)
    valid, rejected, left_out = [], [], Counter()
    for file, raw in contents:
        ok, bad, skipped = _validate_file(file, raw, partition)
        valid.append(ok)
        rejected.append(bad)
        left_out.update(skipped)
    valid, rejected = concat(valid), concat(rejected)
    rows.replace(digest, len(contents), valid, rejected)
    return dg.MaterializeResult(
        metadata={
            "changed": True,
            "content_hash": digest,
            "files": len(contents),
            "rows": len(valid),
            "quarantined": len(rejected),
            "quarantine_reasons": quarantine_reasons(context, partition, rejected),
            "left_out": dict(left_out),
        },
        data_version=dg.DataVersion(digest),
    )


def _validate_file(
    file: ProfileFile, raw: bytes, partition: Partition
) -> tuple[pd.DataFrame | None, pd.DataFrame, dict[str, int]]:
    """Valid rows, quarantine rows and rows left out (by kind) of one file; an unreadable file is one
    quarantine row without `row_index`."""
    path = str(file.path)
    try:
        frame, skipped, refused = read_profile(raw, file.format, partition)
    except ProfileFileError as e:
        return None, unreadable(path, e), {}
    valid, rejected = split_valid(frame, partition.hardware)
    bad = quarantined(path, rejected["row_index"], rejected)
    return valid.assign(path=path), concat([refused.assign(path=path), bad]), skipped
