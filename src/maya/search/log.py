"""The search log in the warehouse: one `searches` row per search and one `search_points` row per
evaluated point (keyed by search id + point), so an interrupted search resumes where it stopped and
identical commands are never emulated twice, even across searches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .outcome import Outcome

SCHEMA = """
CREATE TABLE IF NOT EXISTS searches (
    search_id   VARCHAR PRIMARY KEY,
    space_hash  VARCHAR NOT NULL,
    command     VARCHAR NOT NULL,
    settings    VARCHAR NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS search_points (
    search_id          VARCHAR NOT NULL,
    point              VARCHAR NOT NULL,
    params             VARCHAR NOT NULL,
    seq                INTEGER NOT NULL,
    status             VARCHAR NOT NULL,
    source             VARCHAR NOT NULL,
    iteration_ns       DOUBLE,
    peak_memory_bytes  BIGINT,
    mfu                DOUBLE,
    world_size         INTEGER,
    tokens_per_iteration DOUBLE,
    cost_per_iteration DOUBLE,
    objective          DOUBLE,
    reason             VARCHAR,
    command_hash       VARCHAR,
    trace_hash         VARCHAR,
    run_dir            VARCHAR,
    command            VARCHAR,
    seconds            DOUBLE,
    recorded_at        TIMESTAMP NOT NULL,
    PRIMARY KEY (search_id, point)
);
"""
OUTCOME_COLUMNS = (
    "status",
    "source",
    "iteration_ns",
    "peak_memory_bytes",
    "mfu",
    "world_size",
    "reason",
    "command_hash",
    "trace_hash",
    "run_dir",
    "seconds",
)


class UnknownSearch(KeyError):
    pass


@dataclass
class SearchLog:
    """Points of one search in the warehouse at `warehouse` (default: Maya's)."""

    search_id: str
    warehouse: str | Path | None = None

    def _connect(self):
        from maya.core.warehouse import connect

        con = connect(self.warehouse)
        con.execute(SCHEMA)
        return con

    def open(self, space_hash: str, command: list[str], settings: dict[str, Any], *, must_exist: bool = False) -> None:
        """Create the search's row, or check that an existing one is the same search."""
        con = self._connect()
        try:
            row = con.execute("SELECT space_hash FROM searches WHERE search_id = ?", [self.search_id]).fetchone()
            if row is None and must_exist:
                raise UnknownSearch(f"no search {self.search_id!r} in the warehouse")
            if row is not None and row[0] != space_hash:
                raise ValueError(f"search {self.search_id!r} was run with another space or command")
            if row is None:
                con.execute(
                    "INSERT INTO searches VALUES (?, ?, ?, ?, ?)",
                    [
                        self.search_id,
                        space_hash,
                        json.dumps(command),
                        json.dumps(settings, default=str),
                        datetime.now(UTC),
                    ],
                )
        finally:
            con.close()

    def points(self) -> dict[str, Outcome]:
        """Outcomes already logged for this search, by point key."""
        con = self._connect()
        try:
            rows = con.execute(
                f"SELECT point, {', '.join(OUTCOME_COLUMNS)} FROM search_points WHERE search_id = ?", [self.search_id]
            ).fetchall()
        finally:
            con.close()
        return {r[0]: Outcome.from_dict(dict(zip(OUTCOME_COLUMNS, r[1:]))) for r in rows}

    def emulated(self, command_hash: str) -> Outcome | None:
        """An earlier evaluation (of any search) of the same command, if one was logged."""
        con = self._connect()
        try:
            row = con.execute(
                f"SELECT {', '.join(OUTCOME_COLUMNS)} FROM search_points WHERE command_hash = ? "
                "AND status IN ('ok', 'oom') ORDER BY recorded_at LIMIT 1",
                [command_hash],
            ).fetchone()
        finally:
            con.close()
        return None if row is None else Outcome.from_dict(dict(zip(OUTCOME_COLUMNS, row)))

    def record(
        self,
        key: str,
        params: dict[str, Any],
        seq: int,
        outcome: Outcome,
        *,
        command: list[str] | None,
        tokens: float | None,
        cost: float | None,
        objective: float | None,
    ) -> None:
        row = {
            "search_id": self.search_id,
            "point": key,
            "params": json.dumps(params, default=str),
            "seq": seq,
            **{c: getattr(outcome, c) for c in OUTCOME_COLUMNS},
            "tokens_per_iteration": tokens,
            "cost_per_iteration": cost,
            "objective": objective,
            "command": json.dumps(command) if command else None,
            "recorded_at": datetime.now(UTC),
        }
        con = self._connect()
        try:
            con.execute(
                f"INSERT OR REPLACE INTO search_points ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
        finally:
            con.close()
