"""Where a run's tables live in its directory::

    run.parquet                          one row (table `run`)
    api_calls/rank=0/part-00000.parquet  per-rank tables, one or more parts per rank
    ops/rank=0/part-00000.parquet
    ...

Hidden names (a leading dot) are writers' temporary files: readers never pick them up.
"""

from __future__ import annotations

import re
from pathlib import Path

from .columns import TABLES
from .errors import TraceError

PART_RE = re.compile(r"^part-([0-9]{5,})\.parquet$")
RANK_RE = re.compile(r"^rank=([0-9]+)$")
MAX_RANK = 2**31 - 1


def whole_table_path(run_dir: Path, name: str) -> Path:
    """The file of a table that is not per rank (`run`)."""
    return run_dir / f"{name}.parquet"


def rank_dir(run_dir: Path, name: str, rank: int) -> Path:
    """The folder of one rank's parts of a per-rank table."""
    return run_dir / name / f"rank={rank}"


def part_path(rank_dir: Path, index: int) -> Path:
    return rank_dir / f"part-{index:05d}.parquet"


def next_part_index(rank_dir: Path) -> int:
    if not rank_dir.is_dir():
        return 0
    indices = [int(m.group(1)) for p in rank_dir.iterdir() if (m := PART_RE.match(p.name))]
    return max(indices, default=-1) + 1


def table_files(run_dir: str | Path, name: str) -> list[tuple[int | None, Path]]:
    """(rank, path) of every committed file of table `name` in a run, in rank and part order."""
    run_dir = Path(run_dir)
    spec = TABLES[name]
    if not spec.per_rank:
        p = whole_table_path(run_dir, name)
        return [(None, p)] if p.exists() else []
    base = run_dir / name
    if not base.is_dir():
        return []
    out = []
    for d in base.iterdir():
        if d.name.startswith("."):
            continue
        m = RANK_RE.match(d.name)
        if not m or not d.is_dir():
            raise TraceError(d, "unexpected entry in a per-rank table directory (expected rank=N/)")
        if int(m.group(1)) > MAX_RANK:
            raise TraceError(d, f"rank {m.group(1)} is beyond the largest rank, {MAX_RANK} (`rank` is an int32)")
        parts = sorted((p for p in d.iterdir() if PART_RE.match(p.name)), key=lambda p: p.name)
        out.extend((int(m.group(1)), p) for p in parts)
    return sorted(out, key=lambda rp: (rp[0], rp[1].name))
