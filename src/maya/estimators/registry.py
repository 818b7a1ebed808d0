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
import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from maya import __version__
from maya.core.estimator_versions import (
    LATEST,
    ArtifactError,
    RegistryError,
    UnknownVersion,
    VersionRecord,
    artifact_bytes,
    artifacts_dir,
    records,
    resolve,
)
from maya.core.paths import warehouse_path, write_atomic
from maya.core.warehouse import insert_row, read_only, transaction

from . import artifact
from .gemm_reference import GemmReferences
from .kernel_estimator import KernelEstimator
from .segments import family_of

__all__ = [
    "LATEST",
    "LOADED",
    "ArtifactError",
    "Registered",
    "Registry",
    "RegistryError",
    "UnknownVersion",
    "VersionRecord",
]

ARTIFACT_NAME = "model.zip"


LOADED: dict[str, KernelEstimator] = {}
"""Estimators read in this process, by their artifact's SHA-256: a process predicting many times (a search, a
validation suite) parses an artifact once; `Registry.load` still checks the bytes against the registered digest
on every call."""
LOADED_KEPT = 4
"""Artifacts kept parsed, oldest dropped first."""


@dataclass(frozen=True)
class Registered:
    record: VersionRecord
    reused: bool
    """True when this data and config were already registered (nothing was written)."""


class Registry:
    def __init__(self, warehouse: str | Path | None = None):
        self.warehouse = Path(warehouse) if warehouse else warehouse_path()
        self.artifacts = artifacts_dir(self.warehouse)

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
        with read_only(self.warehouse) as con:
            rows = con.execute("SELECT version FROM estimator_aliases WHERE alias = ?", [LATEST]).fetchall()
        return rows[0][0] if rows else None

    def get(self, version: str = LATEST) -> VersionRecord:
        """A version by name or alias (`latest`), read in one connection to the warehouse."""
        return resolve(self.warehouse, version)

    def load(self, version: str | VersionRecord = LATEST) -> KernelEstimator:
        """The estimator of a version (a name, an alias or its record from `get`), after checking its artifact
        against the recorded SHA-256 (parsed once per process: `LOADED`)."""
        record = version if isinstance(version, VersionRecord) else self.get(version)
        path = self.artifacts / record.artifact_path
        raw = artifact_bytes(self.warehouse, record)
        digest = record.artifact_sha256
        estimator = LOADED.get(digest)
        if estimator is None:
            try:
                estimator = replace(artifact.loads(raw), artifact_sha256=digest)
            except artifact.ArtifactFormatError as e:
                raise ArtifactError(f"estimator version {record.version}: artifact {path} cannot be read: {e}") from e
            while len(LOADED) >= LOADED_KEPT:
                LOADED.pop(next(iter(LOADED)))
            LOADED[digest] = estimator
        return estimator

    def gemm_references(self, version: str | VersionRecord = LATEST) -> GemmReferences:
        """A version's GEMM references and what they answer for, read from its artifact's manifest after checking the
        artifact against the recorded SHA-256 (no model is parsed)."""
        record = version if isinstance(version, VersionRecord) else self.get(version)
        raw = artifact_bytes(self.warehouse, record)
        try:
            return artifact.gemm_references(raw)
        except artifact.ArtifactFormatError as e:
            path = self.artifacts / record.artifact_path
            raise ArtifactError(f"estimator version {record.version}: artifact {path} cannot be read: {e}") from e

    def register(self, estimator: KernelEstimator, *, data_hash: str, config_hash: str, metrics: dict) -> Registered:
        """Store a trained estimator as a new version and point `latest` at it (or return the version
        already trained on this data and config)."""
        raw = artifact.dumps(estimator)
        written: Path | None = None
        try:
            with transaction(self.warehouse) as con:
                existing = records(
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
        """Records of a read-only query; none when the warehouse or the registry tables do not exist yet."""
        with read_only(self.warehouse) as con:
            return records(con, sql, params)
