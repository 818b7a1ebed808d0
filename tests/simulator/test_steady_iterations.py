"""Which iterations are steady state (`simulator/iterations.py`): a partial last iteration is never the steady
one, even when every full iteration holds an evaluation pass (a validation every step)."""

import numpy as np

from maya.simulator.iterations import _steady
from maya.simulator.opcodes import DEVICE_OPS


def test_a_partial_last_iteration_after_validation_is_not_steady():
    opcodes = np.full(32, next(iter(DEVICE_OPS)))
    bounds = np.array([0, 10, 20, 30, 32])  # setup, two full iterations, the start of a stopped one
    evaluating = np.zeros(32, dtype=bool)
    evaluating[15:20] = evaluating[25:30] = True  # both full iterations validate
    assert _steady(bounds, opcodes, "ops", evaluating).steady.tolist() == [1, 2]
    evaluating[25:30] = False  # only the first validates: the other is the steady state
    assert _steady(bounds, opcodes, "ops", evaluating).steady.tolist() == [2]


def test_an_iteration_doing_extra_work_is_not_steady():
    """A function compiled at its first call (an optimizer's Newton-Schulz step) autotunes in iteration 1:
    ten times the device calls of the iterations after it, which alone are steady."""
    device = next(iter(DEVICE_OPS))
    bounds = np.array([0, 20, 130, 141, 152, 162])
    assert _steady(bounds, np.full(162, device), "ops").steady.tolist() == [2, 3, 4]
    bounds = np.array([0, 20, 30, 41, 52, 62])  # a few calls more or less (logging): all steady
    assert _steady(bounds, np.full(62, device), "ops").steady.tolist() == [1, 2, 3, 4]
