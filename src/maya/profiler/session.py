"""What one session of a resumable measurement (a kernel campaign, a workload suite) did: both run their
pending configs until done or out of budget, and a later session resumes where one stopped. Standard library
only, like the rest of the profiler."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionResult:
    """How a session ended: why it stopped, what it measured and how far the whole measurement is."""

    stop_reason: str
    """`complete` (nothing left), `budget` or (a campaign) `cuda-error`."""
    measured: Counter
    """Configs measured in this session: by (family, status) in a campaign, by status in a suite."""
    done: int
    """Configs done, earlier sessions' included."""
    total: int
    elapsed_s: float
    of: str
    """What `total` counts the configs of: `sweep` or `suite`."""
    counts: tuple[str, ...] = ()
    """This session's configs in lines (a campaign's table of family x status, a suite's counts by status)."""

    def summary_lines(self) -> list[str]:
        """This session's counts, then the measurement's progress."""
        return [
            *self.counts,
            f"stopped: {self.stop_reason} after {self.elapsed_s:.0f} s; {self.done}/{self.total} configs "
            f"of the {self.of} done",
        ]
