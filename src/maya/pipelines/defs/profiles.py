"""Raw kernel profiles → validated measured calls in the warehouse (`kernel_profiles`, `quarantine`).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place.
"""

import hashlib
from collections import Counter

import dagster as dg
import pandas as pd

from ..partitions import partition_of, profile_partitions
from ..profile_readers import ProfileFileError, read_profile
from ..profile_schema import split_valid
from ..resources import DataSources, Warehouse
from ..sources import Partition, ProfileFile, content_hash, partition_files
from ..tables import delete_partition, insert


@dg.asset(partitions_def=profile_partitions, group_name="profiles", kinds={"parquet", "duckdb"})
def raw_kernel_profiles(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's profile files as they landed, with their SHA-256 (table `profile_files`)."""
    partition = partition_of(context)
    files = partition_files(data, partition)
    digests = [hashlib.sha256(f.path.read_bytes()).hexdigest() for f in files]
    listing = pd.DataFrame(
        {
            "hardware": partition.hardware,
            "campaign": partition.campaign,
            "path": [str(f.path) for f in files],
            "format": [f.format for f in files],
            "sha256": digests,
            "bytes": [f.path.stat().st_size for f in files],
        }
    )
    with warehouse.transaction() as con:
        stored = con.execute(
            "SELECT path, sha256 FROM profile_files WHERE hardware = ? AND campaign = ? ORDER BY path",
            [partition.hardware, partition.campaign],
        ).fetchall()
        changed = stored != sorted(zip(listing["path"], listing["sha256"]))
        if changed:
            delete_partition(con, "profile_files", partition.hardware, partition.campaign)
            insert(con, "profile_files", listing)
    digest = content_hash(list(zip(listing["path"], digests)))
    return dg.MaterializeResult(
        metadata={
            "files": len(files),
            "bytes": int(listing["bytes"].sum()),
            "content_hash": digest,
            "changed": changed,
        },
        data_version=dg.DataVersion(digest),
    )


@dg.asset(partitions_def=profile_partitions, deps=[raw_kernel_profiles], group_name="profiles", kinds={"duckdb"})
def validated_kernel_profiles(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's measured calls that pass validation (`kernel_profiles`); rejected rows and
    unreadable files go to `quarantine` with the reason, and the rest of the partition goes on."""
    partition = partition_of(context)
    contents = [(f, f.path.read_bytes()) for f in partition_files(data, partition)]
    digest = content_hash([(str(f.path), hashlib.sha256(raw).hexdigest()) for f, raw in contents])
    with warehouse.connect() as con:
        stored = con.execute(
            "SELECT content_hash FROM profile_partitions WHERE hardware = ? AND campaign = ?",
            [partition.hardware, partition.campaign],
        ).fetchone()
    if stored is not None and stored[0] == digest:
        context.log.info(f"{partition}: unchanged since it was validated (content hash {digest[:12]})")
        return dg.MaterializeResult(
            metadata={"changed": False, "content_hash": digest}, data_version=dg.DataVersion(digest)
        )
    valid, rejected, left_out = [], [], Counter()
    for file, raw in contents:
        ok, bad, skipped = _validate_file(file, raw, partition)
        valid.append(ok)
        rejected.append(bad)
        left_out.update(skipped)
    valid, rejected = _concat(valid), _concat(rejected)
    with warehouse.transaction() as con:
        for table in ("kernel_profiles", "quarantine"):
            delete_partition(con, table, partition.hardware, partition.campaign)
        insert(con, "kernel_profiles", valid.assign(campaign=partition.campaign))
        insert(con, "quarantine", rejected.assign(hardware=partition.hardware, campaign=partition.campaign))
        con.execute(
            "INSERT OR REPLACE INTO profile_partitions VALUES (?, ?, ?, ?, ?, ?)",
            [partition.hardware, partition.campaign, digest, len(contents), len(valid), len(rejected)],
        )
    reasons = Counter(rejected["reason"]) if len(rejected) else Counter()
    if reasons:
        context.log.warning(f"{partition}: {len(rejected)} row(s) or file(s) quarantined")
    return dg.MaterializeResult(
        metadata={
            "changed": True,
            "content_hash": digest,
            "files": len(contents),
            "rows": len(valid),
            "quarantined": len(rejected),
            "quarantine_reasons": dict(reasons.most_common(10)),
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
        return (
            None,
            pd.DataFrame({"path": [path], "row_index": [None], "reason": [f"file rejected: {e}"], "record": [None]}),
            {},
        )
    valid, rejected = split_valid(frame, partition.hardware)
    records = rejected.drop(columns=["reason", "row_index"]).to_json(orient="records", lines=True).split("\n")
    quarantined = pd.DataFrame(
        {
            "path": path,
            "row_index": rejected["row_index"],
            "reason": rejected["reason"],
            "record": records[: len(rejected)],
        }
    )  # one JSON line per row
    return valid.assign(path=path), _concat([refused.assign(path=path), quarantined]), skipped


def _concat(frames: list[pd.DataFrame | None]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
