"""Device calls of processes an emulated rank started: read from the rank's capture, summarised for the run.

The capture is the rank's own process. A process it starts (a `subprocess`, a `multiprocessing` child of any start
method, a DataLoader worker, a compile worker, a tool) inherits the preloaded stubs; its calls are counted by the
stubs in `children/<pid>.bin` (native/children.c), not recorded, so the trace and the prediction lack them. A
child's device calls (kernels, GEMMs, copies, memsets, collectives, attention, device allocations; not pinned host
memory, frees or failed allocations) are work the run does that `maya predict` does not price: `maya emulate` names
each such child and `maya predict` notes it. A child with no device calls (`nvidia-smi`'s NVML queries) is listed in
the run's attrs only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from maya_trace_spec.children import origin

from .capture_format import CHILD_REPORT_DTYPE, DOMAINS

CHILDREN = "children"
"""The folder of a rank's capture where its children's reports are."""


def read(raw: Path) -> list[dict]:
    """The reports of the processes the rank whose capture is `raw` started and that called the stubs, by pid (a
    reused pid's in the order made)."""
    reports = []
    for path in sorted((raw / CHILDREN).glob("*.bin"), key=_made):
        data = np.fromfile(path, dtype=CHILD_REPORT_DTYPE, count=1)
        if not len(data) or not data[0]["pid"]:  # made, not yet filled: the child was killed at its first call
            continue
        r = data[0]
        reports.append(
            {
                "pid": int(r["pid"]),
                "rank_pid": int(r["rank_pid"]),
                "parent_pid": int(r["parent_pid"]),
                "forked": bool(r["forked"]),
                "command": r["command"].decode(errors="replace"),
                "calls": int(r["calls"]),
                "device_calls": int(r["device_calls"]),
                "first_api": r["first_api"].decode(errors="replace"),
                "first_domain": str(DOMAINS[r["first_domain"]]) if 0 <= r["first_domain"] < len(DOMAINS) else None,
                "first_device_api": r["first_device_api"].decode(errors="replace") or None,
            }
        )
    return reports


def working(children: list[dict]) -> list[dict]:
    """The children that made device calls: work the run does that the trace lacks."""
    return [c for c in children if c["device_calls"]]


def describe(child: dict) -> str:
    """One child in words: its pid, what it was and its first device call."""
    return (
        f"pid {child['pid']} ({origin(child)}): {child['device_calls']:,} device call(s), "
        f"the first {child['first_device_api'] or child['first_api']}"
    )


def _made(path: Path) -> tuple[int, ...]:
    """`<pid>.bin` or `<pid>-<n>.bin` (a reused pid's n-th report) as (pid, n); names of neither form first."""
    parts = path.stem.split("-")
    return tuple(map(int, parts)) if all(p.isdigit() for p in parts) else (-1,)
