"""Public kernel measurements (`data/kernels_public/`) → validated rows in the warehouse (`public_kernels`,
`public_kernel_quarantine`), one partition per shipped file: data the attention model is fitted on and every
kernel family judged against (`maya.estimators.kernels_public_data.SCHEMA` is the schema).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place (`maya.pipelines.landing`).
"""

import dagster as dg

from maya.estimators.kernels_public_data import KernelsPublicFormatError, read

from ..landing import PUBLIC_KERNEL_TABLES, FileCheck, PartitionRows, quarantined, unreadable
from ..resources import Warehouse
from ..sources import KERNELS_PUBLIC_CAMPAIGN, PUBLIC_KERNEL_SOURCES, ProfileFile, public_kernel_files

public_kernel_partitions = dg.StaticPartitionsDefinition(sorted(PUBLIC_KERNEL_SOURCES))
ROW_COLUMNS = (
    "row_id",
    "dataset",
    "device",
    "kernel_impl",
    "direction",
    "dtype",
    "causal",
    "head_dim",
    "n_heads",
    "batch",
    "seqlen",
    "m",
    "n",
    "k",
    "groups",
    "time_s",
    "flops",
    "source_repo",
    "source_commit",
    "licence",
)
"""What `public_kernels` keeps of a valid row (`dtype` the element type, `device` Maya's name of the GPU)."""


def _rows(context: dg.AssetExecutionContext, warehouse: Warehouse) -> PartitionRows:
    return PartitionRows(warehouse, PUBLIC_KERNEL_TABLES, context.partition_key, KERNELS_PUBLIC_CAMPAIGN)


@dg.asset(partitions_def=public_kernel_partitions, group_name="kernels_public", kinds={"csv", "duckdb"})
def raw_public_kernels(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """The partition's shipped file as it landed, with its SHA-256 (`public_kernel_files`)."""
    return (
        _rows(context, warehouse)
        .land(public_kernel_files(context.partition_key))
        .result("files", "content_hash", "changed")
    )


@dg.asset(
    partitions_def=public_kernel_partitions, deps=[raw_public_kernels], group_name="kernels_public", kinds={"duckdb"}
)
def validated_public_kernels(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """The file's rows that pass validation (`public_kernels`); rows that are no measurement, of a GPU Maya does
    not know, of no single element type or without provenance go to `public_kernel_quarantine` with the reason."""
    source = context.partition_key
    validated = _rows(context, warehouse).validate(context, source, public_kernel_files(source), _validate_file)
    return validated.result("changed", "content_hash", "rows", "quarantined", "quarantine_reasons")


def _validate_file(file: ProfileFile, raw: bytes) -> FileCheck:
    path = str(file.path)
    try:
        checked = read(raw, file.path.name)
    except KernelsPublicFormatError as e:
        return FileCheck(None, unreadable(path, e))
    valid = checked.rows[["row_index", *ROW_COLUMNS]].assign(dtype=checked.rows["dtype_name"].to_numpy(), path=path)
    bad = checked.rejected
    return FileCheck(valid, quarantined(path, bad["row_index"].to_numpy("int64"), bad))
