"""Property-based fuzzing of every input surface (tests/reliability/*_inputs.py), with a fixed seed: the fast
path tries a few inputs per surface (those that train an estimator only in the full suite), the full suite a
few hundred (`benchmarks/reliability.py` tries thousands and prints the figures). Any input that is neither
accepted nor refused with a documented, clear error — a crash, a hang, a wrong answer stored — fails the
test, shrunk to a minimal example."""

from __future__ import annotations

from functools import cache

import pytest
from reliability.harness import FAST, SURFACES, fuzz, load

TRAINED = {"estimator call frame", "measurement datasets", "estimators eval", "vidur compute eval"}
"""Surfaces whose setup trains a small estimator (over 10 s with the machine loaded): the full suite only."""
CASES = [pytest.param(name, FAST, id=f"{name}-fast") for name in SURFACES if name not in TRAINED] + [
    pytest.param(name, budget, id=f"{name}-full", marks=pytest.mark.slow) for name, (_, budget) in SURFACES.items()
]


@cache
def surface(name: str):
    return load(name)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name, examples", CASES)
@pytest.mark.slow
def test_no_input_crashes_hangs_or_corrupts(name, examples):
    fuzz(surface(name), examples)
