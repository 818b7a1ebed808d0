"""Migrations between major versions of the spec.

A migration upgrades one table from major `N` to `N + 1`. Readers apply the chain of
registered migrations to files of older majors; with no path to the current major the file
is rejected with a clear error. `maya trace migrate` rewrites a run in place (atomically).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

Migration = Callable[[str, pa.Table], pa.Table]
"""(table name, table as stored in major N) -> table in major N + 1."""

MIGRATIONS: dict[int, Migration] = {}


def register(from_major: int) -> Callable[[Migration], Migration]:
    def decorate(fn: Migration) -> Migration:
        MIGRATIONS[from_major] = fn
        return fn

    return decorate


def can_migrate(from_major: int, to_major: int) -> bool:
    return all(m in MIGRATIONS for m in range(from_major, to_major))


def migrate(table_name: str, table: pa.Table, from_major: int, to_major: int) -> pa.Table:
    for major in range(from_major, to_major):
        table = MIGRATIONS[major](table_name, table)
    return table
