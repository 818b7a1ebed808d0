"""Suite results in the warehouse: table `validation_rows` (DDL in `maya.core.warehouse_schema`), one row
per (suite content, row, estimator version, predictor digest). Writing a row replaces the one with the same
key in one transaction, so a re-run is idempotent and an interrupted run leaves every finished row stored
and no partial one."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from maya.core.warehouse import insert_row, read_only, transaction

STATUSES = ("ok", "oom", "failed")
"""ok: predicted (it may still predict an out-of-memory); oom: the emulated script ran out of memory, so
no time is predicted; failed: the row could not be emulated or predicted (`reason`)."""


@dataclass(frozen=True)
class RowKey:
    """A suite row as the results name it: its number, a short description, the GPU, model (size) and GPU
    count it was measured on, and its measured time."""

    row: int
    label: str
    """Short description (`7b s2048 512×h100_80gb mbs 6 ga 1 amp_bf16 FULL_SHARD`)."""
    gpu: str
    size: str
    """Model (size) the row trains."""
    gpus: int
    measured_s: float


@dataclass
class RowResult:
    suite: str
    suite_digest: str
    kind: str
    key: RowKey
    estimator_version: str
    predictor_digest: str
    status: str = "failed"
    reason: str | None = None
    hardware: str | None = None
    cluster: str | None = None
    predicted_s: float | None = None
    error_pct: float | None = None
    band_low_s: float | None = None
    band_high_s: float | None = None
    in_band: bool | None = None
    oom: bool | None = None
    oom_reason: str | None = None
    peak_memory_bytes: int | None = None
    memory_capacity_bytes: int | None = None
    mfu: float | None = None
    command_hash: str | None = None
    trace_digest: str | None = None
    trace_reused: bool | None = None
    emulate_s: float | None = None
    predict_s: float | None = None
    details: dict = field(default_factory=dict)
    seq: int | None = None
    """Tokens a sequence."""
    resumed: bool = False
    """Read back from the warehouse (an earlier run's result), not computed by this run."""

    def flat(self) -> dict:
        """The result's fields with the key's in place of `key` (the table's columns, and `resumed`)."""
        out = {}
        for name, value in self.__dict__.items():
            out.update(asdict(value) if name == "key" else {name: value})
        return out

    def record(self) -> dict:
        """The warehouse row."""
        row = {k: v for k, v in self.flat().items() if k != "resumed"}
        row["details"] = json.dumps(self.details, default=str)
        row["recorded_at"] = datetime.now(UTC)
        return row


KEY_COLUMNS = tuple(f.name for f in fields(RowKey))
COLUMNS = tuple(
    c for f in fields(RowResult) if f.name != "resumed" for c in (KEY_COLUMNS if f.name == "key" else [f.name])
)


def save(result: RowResult, warehouse: str | Path | None = None) -> None:
    """Store one row's result, replacing an earlier one with the same key (one transaction)."""
    with transaction(warehouse) as con:
        insert_row(con, "validation_rows", result.record(), replace=True)


def stored(warehouse: str | Path | None, suite_digest: str, version: str, predictor: str) -> dict[int, RowResult]:
    """The results stored for a suite's rows with this estimator version and predictor digest."""
    frame = _query(
        warehouse,
        "SELECT * FROM validation_rows WHERE suite_digest = ? AND estimator_version = ? "
        'AND predictor_digest = ? ORDER BY "row"',
        [suite_digest, version, predictor],
    )
    return {r.key.row: r for r in _results(frame)}


def find_prediction(
    warehouse: str | Path | None,
    trace_digest: str,
    hardware: str,
    cluster: str | None,
    kind: str,
    version: str,
    predictor: str,
) -> RowResult | None:
    """A stored result of any suite for the same trace, target and predictor: its prediction holds."""
    frame = _query(
        warehouse,
        "SELECT * FROM validation_rows WHERE trace_digest = ? AND hardware = ? AND "
        "cluster IS NOT DISTINCT FROM ? AND kind = ? AND estimator_version = ? AND "
        "predictor_digest = ? AND status = 'ok' ORDER BY recorded_at DESC LIMIT 1",
        [trace_digest, hardware, cluster, kind, version, predictor],
    )
    found = _results(frame)
    return found[0] if found else None


def latest(warehouse: str | Path | None) -> pd.DataFrame:
    """Every suite row's most recent result per estimator version (whatever the predictor digest):
    what the pipelines judge and the dashboard plots."""
    return _query(
        warehouse,
        'SELECT * EXCLUDE (n) FROM (SELECT *, row_number() OVER (PARTITION BY suite, "row", '
        "estimator_version ORDER BY recorded_at DESC) AS n FROM validation_rows) WHERE n = 1 "
        'ORDER BY suite, estimator_version, "row"',
        [],
    )


def _query(warehouse: str | Path | None, sql: str, params: list) -> pd.DataFrame:
    with read_only(warehouse) as con:  # no warehouse or no suite run in it yet: no rows
        return con.execute(sql, params).df()


def _results(frame: pd.DataFrame) -> list[RowResult]:
    out = []
    for record in frame.to_dict("records"):
        values = {k: (None if _missing(v) else v) for k, v in record.items() if k in COLUMNS}
        values["details"] = json.loads(values["details"]) if values.get("details") else {}
        key = RowKey(**{c: values.pop(c) for c in KEY_COLUMNS})
        out.append(RowResult(**values, key=key, resumed=True))
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value is pd.NaT or value is pd.NA
