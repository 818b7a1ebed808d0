"""Versioned estimators in the DuckDB warehouse.

Table `estimator_versions` (DDL in `maya.core.warehouse_schema`): one row per trained version (`v1`, `v2`,
...) with its hardware, families, training-data hash, training-config hash, metrics (JSON), creation time
and artifact.
The artifact is a file, `<warehouse dir>/estimators/<version>/model.zip` (for the default warehouse
`$MAYA_HOME/estimators/<version>/model.zip`), whose SHA-256 the row records; the row stores the path
relative to `<warehouse dir>/estimators`. Table `estimator_aliases` maps `latest` to the newest version.

Registration is atomic: the artifact is written to a temporary file and renamed into place inside
the transaction that inserts the row and moves `latest`; on any failure the transaction rolls back
and the file is removed. Registering data and config already registered returns that version
unchanged (no duplicate). Loading only reads: a missing or corrupted artifact raises
`ArtifactError` naming the version and the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from maya import __version__
from maya.core.paths import warehouse_path
from maya.core.warehouse import insert_row, read_only, transaction

from . import artifact
from .kernel_estimator import KernelEstimator
from .segments import family_of

LATEST = "latest"
ARTIFACT_NAME = "model.zip"
_COLUMNS = (
    "version",
    "created_at",
    "data_hash",
    "config_hash",
    "hardware",
    "families",
    "training_rows",
    "metrics",
    "artifact_path",
    "artifact_sha256",
    "artifact_bytes",
    "maya_version",
)


LOADED: dict[str, KernelEstimator] = {}
"""Estimators read in this process, by their artifact's SHA-256: a process predicting many times (a search, a
validation suite) parses an artifact once; `Registry.load` still checks the bytes against the registered digest
on every call."""
LOADED_KEPT = 4
"""Artifacts kept parsed, oldest dropped first."""


class RegistryError(Exception):
    """An estimator version cannot be found or used."""


class UnknownVersion(RegistryError):
    pass


class ArtifactError(RegistryError):
    """A registered version's artifact is missing, altered or unreadable."""


@dataclass(frozen=True)
class VersionRecord:
    version: str
    created_at: datetime
    data_hash: str
    config_hash: str
    hardware: list[str]
    families: list[str]
    training_rows: int
    metrics: dict
    artifact_path: str
    artifact_sha256: str
    artifact_bytes: int
    maya_version: str


@dataclass(frozen=True)
class Registered:
    record: VersionRecord
    reused: bool
    """True when this data and config were already registered (nothing was written)."""


class Registry:
    def __init__(self, warehouse: str | Path | None = None):
        self.warehouse = Path(warehouse) if warehouse else warehouse_path()
        self.artifacts = self.warehouse.parent / "estimators"

    def find(self, data_hash: str, config_hash: str) -> VersionRecord | None:
        """The version trained on this data with this config, if any."""
        rows = self._query(
            "SELECT {} FROM estimator_versions WHERE data_hash = ? AND config_hash = ?", [data_hash, config_hash]
        )
        return rows[0] if rows else None

    def versions(self) -> list[VersionRecord]:
        """Every version, oldest first."""
        return self._query("SELECT {} FROM estimator_versions ORDER BY created_at, version")

    def latest(self) -> str | None:
        rows = self._read("SELECT version FROM estimator_aliases WHERE alias = ?", [LATEST])
        return rows[0][0] if rows else None

    def get(self, version: str = LATEST) -> VersionRecord:
        """A version by name or alias (`latest`), read in one connection to the warehouse."""
        with read_only(self.warehouse) as con:
            if version == LATEST:
                alias = con.execute("SELECT version FROM estimator_aliases WHERE alias = ?", [LATEST]).fetchall()
                name = alias[0][0] if alias else None
            else:
                name = version
            rows = self._records(con, "SELECT {} FROM estimator_versions WHERE version = ?", [name]) if name else []
        if not rows:
            known = [r.version for r in self.versions()]
            raise UnknownVersion(
                f"unknown estimator version {version!r} in {self.warehouse}; "
                + (
                    f"known: {', '.join(known)}"
                    if known
                    else "none registered yet (train one with `maya estimators train`)"
                )
            )
        return rows[0]

    def load(self, version: str | VersionRecord = LATEST) -> KernelEstimator:
        """The estimator of a version (a name, an alias or its record from `get`), after checking its artifact
        against the recorded SHA-256 (parsed once per process: `LOADED`)."""
        record = version if isinstance(version, VersionRecord) else self.get(version)
        path = self.artifacts / record.artifact_path
        if not path.is_file():
            raise ArtifactError(f"estimator version {record.version}: artifact {path} is missing")
        raw = path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != record.artifact_sha256:
            raise ArtifactError(
                f"estimator version {record.version}: artifact {path} is corrupted "
                f"(SHA-256 {digest[:16]}..., registered {record.artifact_sha256[:16]}...)"
            )
        estimator = LOADED.get(digest)
        if estimator is None:
            try:
                estimator = artifact.loads(raw)
            except artifact.ArtifactFormatError as e:
                raise ArtifactError(f"estimator version {record.version}: artifact {path} cannot be read: {e}") from e
            while len(LOADED) >= LOADED_KEPT:
                LOADED.pop(next(iter(LOADED)))
            LOADED[digest] = estimator
        return estimator

    def register(self, estimator: KernelEstimator, *, data_hash: str, config_hash: str, metrics: dict) -> Registered:
        """Store a trained estimator as a new version and point `latest` at it (or return the version
        already trained on this data and config)."""
        raw = artifact.dumps(estimator)
        written: Path | None = None
        try:
            with transaction(self.warehouse) as con:
                existing = self._records(
                    con,
                    "SELECT {} FROM estimator_versions WHERE data_hash = ? AND config_hash = ?",
                    [data_hash, config_hash],
                )
                if existing:
                    return Registered(existing[0], reused=True)
                number = con.execute(
                    "SELECT coalesce(max(CAST(substr(version, 2) AS INTEGER)), 0) + 1 FROM estimator_versions"
                ).fetchone()[0]
                version = f"v{number}"
                written = write_atomic(self.artifacts / version / ARTIFACT_NAME, raw)
                row = {
                    "version": version,
                    "created_at": datetime.now(UTC),
                    "data_hash": data_hash,
                    "config_hash": config_hash,
                    "hardware": metrics.get("hardware", []),
                    "families": sorted({family_of(key) for key in metrics.get("families", {})}),
                    "training_rows": metrics.get("rows", 0),
                    "metrics": json.dumps(metrics, sort_keys=True),
                    "artifact_path": f"{version}/{ARTIFACT_NAME}",
                    "artifact_sha256": hashlib.sha256(raw).hexdigest(),
                    "artifact_bytes": len(raw),
                    "maya_version": __version__,
                }
                insert_row(con, "estimator_versions", row)
                insert_row(con, "estimator_aliases", {"alias": LATEST, "version": version}, replace=True)
        except BaseException:
            if written is not None:
                shutil.rmtree(written.parent, ignore_errors=True)
            raise
        return Registered(self.get(version), reused=False)

    def _query(self, sql: str, params: list | None = None) -> list[VersionRecord]:
        return [_record(row) for row in self._read(sql.format(", ".join(_COLUMNS)), params)]

    def _read(self, sql: str, params: list | None = None) -> list[tuple]:
        """Rows of a read-only query; none when the warehouse or the registry tables do not exist yet."""
        with read_only(self.warehouse) as con:
            return con.execute(sql, params or []).fetchall()

    @staticmethod
    def _records(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> list[VersionRecord]:
        return [_record(row) for row in con.execute(sql.format(", ".join(_COLUMNS)), params).fetchall()]


def _record(row: tuple) -> VersionRecord:
    values = dict(zip(_COLUMNS, row))
    values["metrics"] = json.loads(values["metrics"])
    return VersionRecord(**values)


def write_atomic(path: Path, data: bytes) -> Path:
    """Write via a temporary file in the same directory, flushed to disk, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
