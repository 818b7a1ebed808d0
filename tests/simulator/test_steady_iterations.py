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


def test_a_short_last_iteration_with_a_backward_is_a_whole_step():
    """OLMo-core's trainer runs a forward and backward on its first batch before its first step: iteration 1 holds
    two passes, iteration 2 (the last kept of `--iterations 3`) one. It is the steady one, not a partial iteration;
    a short last iteration without a backward (teardown) still is."""
    device = next(iter(DEVICE_OPS))
    bounds = np.array([0, 10, 50, 65])  # setup, a dry run and a step, one step (under half the calls)
    backward = np.zeros(65, dtype=bool)
    backward[30:50] = backward[58:65] = True
    assert _steady(bounds, np.full(65, device), "ops", None, backward).steady.tolist() == [2]
    backward[58:65] = False
    assert _steady(bounds, np.full(65, device), "ops", None, backward).steady.tolist() == [1]
