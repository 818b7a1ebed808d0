"""Migrations between major versions of the spec, and the meaning changes of minor versions.

A migration upgrades one table from major `N` to `N + 1`. Readers apply the chain of
registered migrations to files of older majors; with no path to the current major the file
is rejected with a clear error. `maya trace migrate` rewrites a run in place (atomically).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

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


def upgrade_minor(table_name: str, table: pa.Table, minor: int) -> pa.Table:
    """Give a table of an older minor of the current major the meaning its values have now.

    1.5: `api_calls.domain` `device` also marks the work a CUDA graph launch replays (before, such rows kept the
    domain of their captured call, so a replayed kernel cost the host a launch)."""
    if table_name != "api_calls" or minor >= 5:
        return table
    replayed = pc.fill_null(pc.match_substring_regex(table["args"], r'"cuda_graph_replay":\s*true'), False)
    domain = pc.if_else(replayed, pa.scalar("device", table.schema.field("domain").type), table["domain"])
    return table.set_column(table.schema.get_field_index("domain"), table.schema.field("domain"), domain)
