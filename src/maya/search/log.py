"""The search log in the warehouse (DDL in `maya.core.warehouse_schema`): one `searches` row per search
and one `search_points` row per evaluated point (keyed by search id + point), so an interrupted search
resumes where it stopped and identical commands are never emulated twice, even across searches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from maya.core.warehouse import insert_row, transaction

from .outcome import Outcome

OUTCOME_COLUMNS = (
    "status",
    "source",
    "iteration_ns",
    "peak_memory_bytes",
    "mfu",
    "hfu",
    "world_size",
    "reason",
    "command_hash",
    "prediction_hash",
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

    def open(self, space_hash: str, command: list[str], settings: dict[str, Any], *, must_exist: bool = False) -> None:
        """Create the search's row, or check that an existing one is the same search."""
        with transaction(self.warehouse) as con:
            row = con.execute("SELECT space_hash FROM searches WHERE search_id = ?", [self.search_id]).fetchone()
            if row is None and must_exist:
                raise UnknownSearch(f"no search {self.search_id!r} in the warehouse")
            if row is not None and row[0] != space_hash:
                raise ValueError(f"search {self.search_id!r} was run with another space or command")
            if row is None:
                insert_row(
                    con,
                    "searches",
                    {
                        "search_id": self.search_id,
                        "space_hash": space_hash,
                        "command": json.dumps(command),
                        "settings": json.dumps(settings, default=str),
                        "created_at": datetime.now(UTC),
                    },
                )

    def points(self) -> dict[str, Outcome]:
        """Outcomes already logged for this search, by point key."""
        with transaction(self.warehouse) as con:
            rows = con.execute(
                f"SELECT point, {', '.join(OUTCOME_COLUMNS)} FROM search_points WHERE search_id = ?", [self.search_id]
            ).fetchall()
        return {r[0]: Outcome.from_dict(dict(zip(OUTCOME_COLUMNS, r[1:]))) for r in rows}

    def emulated(self, prediction_hash: str) -> Outcome | None:
        """An earlier outcome (of any search) of the same command, emulated and predicted alike, if one was
        logged."""
        return self._first("prediction_hash", prediction_hash)

    def captured(self, command_hash: str) -> Outcome | None:
        """An earlier outcome (of any search) of the same command emulated alike, however it was predicted, if one
        was logged: its capture (`run_dir`) can be predicted again."""
        return self._first("command_hash", command_hash)

    def _first(self, column: str, value: str) -> Outcome | None:
        with transaction(self.warehouse) as con:
            row = con.execute(
                f"SELECT {', '.join(OUTCOME_COLUMNS)} FROM search_points WHERE {column} = ? "
                "AND status IN ('ok', 'oom') ORDER BY recorded_at LIMIT 1",
                [value],
            ).fetchone()
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
        with transaction(self.warehouse) as con:
            insert_row(con, "search_points", row, replace=True)
