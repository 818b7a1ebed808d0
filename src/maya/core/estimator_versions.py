"""Registered estimator versions as the warehouse records them, without any model code.

A version or alias resolves to its `VersionRecord`, and its artifact's bytes are read back checked against the
recorded SHA-256. `maya.estimators.Registry` (which parses and registers artifacts) builds on these, and `maya
emulate` names the version its ranks will load through them without importing the estimators, a layer above the
emulator (`maya.emulator.device_time.resolve`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from maya.core.warehouse import read_only

LATEST = "latest"
COLUMNS = (
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
"""The columns of `estimator_versions` a `VersionRecord` holds, in its order."""


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


def records(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[VersionRecord]:
    """The records a query selects, its `{}` standing for `COLUMNS`."""
    rows = con.execute(sql.format(", ".join(COLUMNS)), params or []).fetchall()
    return [_record(row) for row in rows]


def _record(row: tuple) -> VersionRecord:
    values = dict(zip(COLUMNS, row))
    values["metrics"] = json.loads(values["metrics"])
    return VersionRecord(**values)


def resolve(warehouse: Path, version: str = LATEST) -> VersionRecord:
    """The record of `version` (a name or the `latest` alias), read in one connection; `UnknownVersion` names the
    known ones."""
    with read_only(warehouse) as con:
        if version == LATEST:
            alias = con.execute("SELECT version FROM estimator_aliases WHERE alias = ?", [LATEST]).fetchall()
            name = alias[0][0] if alias else None
        else:
            name = version
        found = records(con, "SELECT {} FROM estimator_versions WHERE version = ?", [name]) if name else []
        known = (
            []
            if found
            else [
                r[0]
                for r in con.execute("SELECT version FROM estimator_versions ORDER BY created_at, version").fetchall()
            ]
        )
    if not found:
        raise UnknownVersion(
            f"unknown estimator version {version!r} in {warehouse}; "
            + (
                f"known: {', '.join(known)}"
                if known
                else "none registered yet (train one with `maya estimators train`)"
            )
        )
    return found[0]


def artifacts_dir(warehouse: Path) -> Path:
    """Where the artifacts of `warehouse`'s versions live (`<warehouse dir>/estimators`)."""
    return warehouse.parent / "estimators"


def artifact_bytes(warehouse: Path, record: VersionRecord) -> bytes:
    """The artifact of `record`, its bytes checked against the registered SHA-256 (`ArtifactError`: missing or
    corrupted)."""
    path = artifacts_dir(warehouse) / record.artifact_path
    if not path.is_file():
        raise ArtifactError(f"estimator version {record.version}: artifact {path} is missing")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != record.artifact_sha256:
        raise ArtifactError(
            f"estimator version {record.version}: artifact {path} is corrupted "
            f"(SHA-256 {digest[:16]}..., registered {record.artifact_sha256[:16]}...)"
        )
    return raw
