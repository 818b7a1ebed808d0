"""Device calls of processes an emulated rank started: read from the rank's capture, summarised for the run.

The capture is the rank's own process. A process it starts (a `subprocess`, a `multiprocessing` child of any start
method, a DataLoader worker, a compile worker, a tool) inherits the preloaded stubs; its calls are counted by the
stubs in `children/<pid>.bin` (native/children.c), not recorded, so the trace and the prediction lack them. A
child's device calls (kernels, GEMMs, copies, memsets, collectives, attention, allocations) are work the run does
that `maya predict` does not price: `maya emulate` names each such child and `maya predict` notes it. A child with
no device calls (`nvidia-smi`'s NVML queries) is listed in the run's attrs only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .capture_format import CHILD_REPORT_DTYPE, DOMAINS

CHILDREN = "children"
"""The folder of a rank's capture where its children's reports are."""


def read(raw: Path) -> list[dict]:
    """The reports of the processes the rank whose capture is `raw` started and that called the stubs, by pid."""
    reports = []
    for path in sorted((raw / CHILDREN).glob("*.bin"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
        data = np.fromfile(path, dtype=CHILD_REPORT_DTYPE, count=1)
        if not len(data):  # made, not yet filled: the child was killed at its first call
            continue
        r = data[0]
        reports.append(
            {
                "pid": int(r["pid"]),
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
    what = "a fork of the rank" if child["forked"] else f"`{_cut(child['command'])}`"
    return (
        f"pid {child['pid']} ({what}): {child['device_calls']:,} device call(s), "
        f"the first {child['first_device_api'] or child['first_api']}"
    )


def _cut(command: str, width: int = 80) -> str:
    return command if len(command) <= width else command[: width - 3] + "..."
