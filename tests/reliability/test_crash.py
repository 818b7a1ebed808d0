"""Crash safety (tests/reliability/crash.py): every writer killed at random points leaves what it stores old
or new and readable, and the next run resumes to the uninterrupted result. The fast path kills four writers
once each, the full suite every writer eight times (`benchmarks/reliability.py` hundreds of times)."""

from __future__ import annotations

import pytest
from reliability.crash import fresh_parent, kill_trials_fresh
from reliability.crash_scenarios import scenarios

NAMES = [s.name for s in scenarios()]
FAST = ("estimator registry", "predictions store", "maya validate results", "trace writer")
"""The writers the fast path kills (once each): the cheapest to set up (each under 10 s on a loaded machine; the
trace writer about 3 s)."""
CASES = [pytest.param(name, 1, id=f"{name}-fast") for name in FAST] + [
    pytest.param(name, 8, id=f"{name}-full", marks=pytest.mark.slow) for name in NAMES
]


@pytest.fixture(scope="module")
def parent():
    """One fresh interpreter forks every scenario's trials (pytest's own process may hold threads)."""
    with fresh_parent() as pool:
        yield pool


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name, trials", CASES)
@pytest.mark.slow
def test_killed_writers_leave_old_or_new_and_resume(name, trials, tmp_path, parent):
    tally = kill_trials_fresh(name, trials, seed=20, workdir=tmp_path, parent=parent)
    assert tally.trials == trials
    assert (tally.corrupt, tally.not_resumed, tally.hangs) == (0, 0, 0), tally.examples
