"""Raw collective measurements → validated rows in the warehouse (`collective_measurements`,
`collective_quarantine`), partitioned by network and campaign: data for the collective model to be fitted
and judged on (`maya.estimators.vidur_data.check_collectives` is the schema).

Both assets are idempotent: a partition is rewritten only when its content hash changed, in one
transaction, so a run killed midway leaves the previous rows in place.
"""

import hashlib
import io

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from maya.estimators.vidur_data import VidurFormatError, check_collectives

from ..partitions import collective_partitions, network_partition_of
from ..resources import DataSources, Warehouse
from ..sources import NetworkPartition, ProfileFile, content_hash, network_files
from ..tables import delete_partition, insert

MEASUREMENT_COLUMNS = ("row_index", "collective", "bytes", "ranks", "nodes", "devices_per_node", "measured_ns")


@dg.asset(partitions_def=collective_partitions, group_name="collectives", kinds={"parquet", "duckdb"})
def raw_collective_measurements(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's collective-measurement files as they landed, with their SHA-256 (`collective_files`)."""
    partition = network_partition_of(context)
    files = network_files(data, partition)
    digests = [hashlib.sha256(f.path.read_bytes()).hexdigest() for f in files]
    listing = pd.DataFrame(
        {
            "network": partition.network,
            "campaign": partition.campaign,
            "path": [str(f.path) for f in files],
            "format": [f.format for f in files],
            "sha256": digests,
            "bytes": [f.path.stat().st_size for f in files],
        }
    )
    with warehouse.transaction() as con:
        stored = con.execute(
            "SELECT path, sha256 FROM collective_files WHERE network = ? AND campaign = ? ORDER BY path",
            [partition.network, partition.campaign],
        ).fetchall()
        changed = stored != sorted(zip(listing["path"], listing["sha256"]))
        if changed:
            delete_partition(con, "collective_files", partition.network, partition.campaign, key="network")
            insert(con, "collective_files", listing)
    digest = content_hash(list(zip(listing["path"], digests)))
    return dg.MaterializeResult(
        metadata={"files": len(files), "content_hash": digest, "changed": changed}, data_version=dg.DataVersion(digest)
    )


@dg.asset(
    partitions_def=collective_partitions, deps=[raw_collective_measurements], group_name="collectives", kinds={"duckdb"}
)
def validated_collective_measurements(
    context: dg.AssetExecutionContext, warehouse: Warehouse, data: DataSources
) -> dg.MaterializeResult:
    """The partition's collective rows that pass validation (`collective_measurements`); rejected rows and
    unreadable files go to `collective_quarantine` with the reason, and the rest of the partition goes on."""
    partition = network_partition_of(context)
    contents = [(f, f.path.read_bytes()) for f in network_files(data, partition)]
    digest = content_hash([(str(f.path), hashlib.sha256(raw).hexdigest()) for f, raw in contents])
    with warehouse.connect() as con:
        stored = con.execute(
            "SELECT content_hash FROM collective_partitions WHERE network = ? AND campaign = ?",
            [partition.network, partition.campaign],
        ).fetchone()
    if stored is not None and stored[0] == digest:
        context.log.info(f"{partition}: unchanged since it was validated (content hash {digest[:12]})")
        return dg.MaterializeResult(
            metadata={"changed": False, "content_hash": digest}, data_version=dg.DataVersion(digest)
        )
    parts = [_validate_file(f, raw, partition) for f, raw in contents]
    valid = _concat([p[0] for p in parts])
    rejected = _concat([p[1] for p in parts])
    with warehouse.transaction() as con:
        for table in ("collective_measurements", "collective_quarantine"):
            delete_partition(con, table, partition.network, partition.campaign, key="network")
        insert(con, "collective_measurements", valid.assign(network=partition.network, campaign=partition.campaign))
        insert(con, "collective_quarantine", rejected.assign(network=partition.network, campaign=partition.campaign))
        con.execute(
            "INSERT OR REPLACE INTO collective_partitions VALUES (?, ?, ?, ?, ?, ?)",
            [partition.network, partition.campaign, digest, len(contents), len(valid), len(rejected)],
        )
    reasons = rejected["reason"].value_counts().head(10).to_dict() if len(rejected) else {}
    if reasons:
        context.log.warning(f"{partition}: {len(rejected)} row(s) or file(s) quarantined")
    return dg.MaterializeResult(
        metadata={
            "changed": True,
            "content_hash": digest,
            "rows": len(valid),
            "quarantined": len(rejected),
            "quarantine_reasons": {str(k): int(v) for k, v in reasons.items()},
        },
        data_version=dg.DataVersion(digest),
    )


def _validate_file(file: ProfileFile, raw: bytes, partition: NetworkPartition) -> tuple[pd.DataFrame, pd.DataFrame]:
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
        return pd.DataFrame(), pd.DataFrame(
            {"path": [path], "row_index": [None], "reason": [f"file rejected: {e}"], "record": [None]}
        )
    in_file = mine.index.to_numpy()  # row positions in the file
    valid = checked.calls[list(MEASUREMENT_COLUMNS)].assign(
        row_index=in_file[checked.calls["row_index"].to_numpy()], path=path
    )
    bad = checked.rejected
    records = bad.drop(columns=["reason", "row_index"]).to_json(orient="records", lines=True).split("\n")
    quarantined = pd.DataFrame(
        {
            "path": path,
            "row_index": in_file[bad["row_index"].to_numpy()].astype("int64"),
            "reason": bad["reason"].to_numpy(),
            "record": records[: len(bad)],
        }
    )
    return valid, quarantined


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
