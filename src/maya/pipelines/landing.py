"""What every raw-data asset pair does (kernel profiles by hardware x campaign, collective measurements by
network x campaign, public kernel measurements by source file), each with its own tables (`Tables`) and file check: list a partition's files as they
landed, with their SHA-256 (`PartitionRows.land`); validate its rows and write them with their quarantine
(`PartitionRows.validate`), only when its content hash changed and in one transaction, so a run killed midway
leaves the previous rows in place."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg
import numpy as np
import pandas as pd

from .resources import Warehouse
from .sources import NetworkPartition, Partition, ProfileFile, content_hash
from .tables import delete_partition, insert


@dataclass(frozen=True)
class Tables:
    """A kind of raw data's warehouse tables, and the column that names its partitions' first key."""

    key: str
    files: str
    """The landed files, with their SHA-256."""
    rows: str
    """The rows that pass validation."""
    quarantine: str
    """Rejected rows and unreadable files, with the reason."""
    partitions: str
    """The content hash each partition was validated at, with its counts."""


PROFILE_TABLES = Tables("hardware", "profile_files", "kernel_profiles", "quarantine", "profile_partitions")
COLLECTIVE_TABLES = Tables(
    "network", "collective_files", "collective_measurements", "collective_quarantine", "collective_partitions"
)
PUBLIC_KERNEL_TABLES = Tables(
    "source", "public_kernel_files", "public_kernels", "public_kernel_quarantine", "public_kernel_partitions"
)


@dataclass(frozen=True)
class Landed:
    """A partition's files as they landed."""

    files: int
    bytes: int
    content_hash: str
    changed: bool
    """The listing differs from the stored one (and replaced it)."""

    def result(self, *metadata: str) -> dg.MaterializeResult:
        """The asset's materialization, with these fields as its metadata."""
        return dg.MaterializeResult(
            metadata={name: getattr(self, name) for name in metadata}, data_version=dg.DataVersion(self.content_hash)
        )


@dataclass(frozen=True)
class FileCheck:
    """One file's rows: valid, quarantined (with `path`, `row_index`, `reason`, `record`) and left out by kind."""

    valid: pd.DataFrame | None
    rejected: pd.DataFrame
    left_out: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Validated:
    """A partition validated (`changed`), or found as it was validated before."""

    changed: bool
    content_hash: str
    files: int = 0
    rows: int = 0
    quarantined: int = 0
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    """The ten most frequent."""
    left_out: dict[str, int] = field(default_factory=dict)

    def result(self, *metadata: str) -> dg.MaterializeResult:
        """The asset's materialization, with these fields as its metadata (`changed` and `content_hash` alone when
        nothing changed)."""
        names = metadata if self.changed else ("changed", "content_hash")
        return dg.MaterializeResult(
            metadata={name: getattr(self, name) for name in names}, data_version=dg.DataVersion(self.content_hash)
        )


@dataclass(frozen=True)
class PartitionRows:
    """One partition (`key` x `campaign`) of a kind of raw data in the warehouse."""

    warehouse: Warehouse
    tables: Tables
    key: str
    campaign: str

    def land(self, files: list[ProfileFile]) -> Landed:
        """List `files` with their SHA-256 in the files table, replacing the partition's listing when it changed."""
        digests = [hashlib.sha256(f.path.read_bytes()).hexdigest() for f in files]
        listing = pd.DataFrame(
            {
                self.tables.key: self.key,
                "campaign": self.campaign,
                "path": [str(f.path) for f in files],
                "format": [f.format for f in files],
                "sha256": digests,
                "bytes": [f.path.stat().st_size for f in files],
            }
        )
        with self.warehouse.transaction() as con:
            stored = con.execute(
                f"SELECT path, sha256 FROM {self.tables.files} WHERE {self.tables.key} = ? AND campaign = ? "
                "ORDER BY path",
                [self.key, self.campaign],
            ).fetchall()
            changed = stored != sorted(zip(listing["path"], listing["sha256"]))
            if changed:
                delete_partition(con, self.tables.files, self.key, self.campaign, key=self.tables.key)
                insert(con, self.tables.files, listing)
        digest = content_hash(list(zip(listing["path"], digests)))
        return Landed(len(files), int(listing["bytes"].sum()), digest, changed)

    def validate(
        self,
        context: dg.AssetExecutionContext,
        partition: Partition | NetworkPartition | str,
        files: list[ProfileFile],
        check: Callable[[ProfileFile, bytes], FileCheck],
    ) -> Validated:
        """Check each of `files` and replace the partition's rows with what passed and what was quarantined,
        unless their content is what it was validated at."""
        contents = [(f, f.path.read_bytes()) for f in files]
        digest = content_hash([(str(f.path), hashlib.sha256(raw).hexdigest()) for f, raw in contents])
        with self.warehouse.connect() as con:
            stored = con.execute(
                f"SELECT content_hash FROM {self.tables.partitions} WHERE {self.tables.key} = ? AND campaign = ?",
                [self.key, self.campaign],
            ).fetchone()
        if stored is not None and stored[0] == digest:
            context.log.info(f"{partition}: unchanged since it was validated (content hash {digest[:12]})")
            return Validated(False, digest)
        checks = [check(f, raw) for f, raw in contents]
        valid, rejected = concat([c.valid for c in checks]), concat([c.rejected for c in checks])
        self._replace(digest, len(contents), valid, rejected)
        reasons = Counter(rejected["reason"]) if len(rejected) else Counter()
        if reasons:
            context.log.warning(f"{partition}: {len(rejected)} row(s) or file(s) quarantined")
        left_out: Counter[str] = Counter()
        for c in checks:
            left_out.update(c.left_out)
        return Validated(
            changed=True,
            content_hash=digest,
            files=len(contents),
            rows=len(valid),
            quarantined=len(rejected),
            quarantine_reasons={str(k): int(v) for k, v in reasons.most_common(10)},
            left_out=dict(left_out),
        )

    def _replace(self, digest: str, files: int, valid: pd.DataFrame, rejected: pd.DataFrame) -> None:
        """Replace the partition's valid and quarantined rows and record the content hash they were validated
        at, in one transaction."""
        where = {self.tables.key: self.key, "campaign": self.campaign}
        with self.warehouse.transaction() as con:
            for table in (self.tables.rows, self.tables.quarantine):
                delete_partition(con, table, self.key, self.campaign, key=self.tables.key)
            insert(con, self.tables.rows, valid.assign(**where))
            insert(con, self.tables.quarantine, rejected.assign(**where))
            con.execute(
                f"INSERT OR REPLACE INTO {self.tables.partitions} VALUES (?, ?, ?, ?, ?, ?)",
                [self.key, self.campaign, digest, files, len(valid), len(rejected)],
            )


def unreadable(path: str, error: Exception) -> pd.DataFrame:
    """The quarantine row of a file that cannot be read (no `row_index`)."""
    return pd.DataFrame({"path": [path], "row_index": [None], "reason": [f"file rejected: {error}"], "record": [None]})


def quarantined(path: str, row_index: np.ndarray | pd.Series, rejected: pd.DataFrame) -> pd.DataFrame:
    """The quarantine rows of a file's `rejected` rows (with a `reason` and a `row_index` column): where they
    are in the file (`row_index`), why, and each row's values as one JSON line."""
    records = rejected.drop(columns=["reason", "row_index"]).to_json(orient="records", lines=True).split("\n")
    return pd.DataFrame(
        {
            "path": path,
            "row_index": row_index,
            "reason": rejected["reason"].to_numpy(),
            "record": records[: len(rejected)],
        }
    )


def concat(frames: list[pd.DataFrame | None]) -> pd.DataFrame:
    """The non-empty frames as one (an empty frame when there is none)."""
    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
