"""The run attrs `child_processes` (SPEC.md): reports of processes the ranks started, read whatever else they hold."""

from __future__ import annotations


def working(attrs: object) -> dict[int, list[dict]]:
    """Rank -> the reports in `attrs["child_processes"]` of processes that made device calls (an integer above 0), by
    rank; a rank that is not a number, reports that are not a list of objects and other counts are skipped."""
    children = attrs.get("child_processes") if isinstance(attrs, dict) else None
    found = {}
    for rank, reports in children.items() if isinstance(children, dict) else ():
        if not (str(rank).isdigit() and isinstance(reports, list)):
            continue
        kept = [c for c in reports if isinstance(c, dict) and _count(c.get("device_calls")) > 0]
        if kept:
            found[int(rank)] = kept
    return dict(sorted(found.items()))


def origin(child: dict, width: int = 80) -> str:
    """What a process was, in words: a fork of the rank, a fork of another process (with its command line), or the
    command line of a program started, whitespace collapsed and cut at `width`."""
    command = " ".join(str(child.get("command", "")).split())
    command = f"`{command if len(command) <= width else command[: width - 3] + '...'}`"
    if not child.get("forked"):
        return command
    parent = child.get("parent_pid")
    return "a fork of the rank" if parent == child.get("rank_pid") else f"a fork of pid {parent}, {command}"


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
