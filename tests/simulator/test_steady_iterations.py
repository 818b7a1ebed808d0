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


def test_a_short_last_iteration_that_ends_a_step_is_a_whole_step():
    """OLMo-core's trainer runs a forward and backward on its first batch before its first step: iteration 1 holds
    two passes, iteration 2 (the last kept of `--iterations 3`) one. It ends with the optimizer's step after its
    backward: the steady one, not a partial iteration."""
    device = next(iter(DEVICE_OPS))
    bounds = np.array([0, 10, 50, 65])  # setup, a dry run and a step, one step (under half the calls)
    backward, optimizer = np.zeros(65, dtype=bool), np.zeros(65, dtype=bool)
    backward[30:45] = backward[55:62] = True
    optimizer[10] = optimizer[45:50] = optimizer[50] = optimizer[62:65] = True  # zero_grad, then the step
    assert _steady(bounds, np.full(65, device), "ops", None, backward, optimizer).steady.tolist() == [2]


def test_a_short_last_iteration_without_a_step_after_its_backward_is_partial():
    """A run stopped mid-backward (an OOM, a failed capture), or a script ending with a forward and a backward and no
    step: its last iteration is partial, though it holds a backward and an optimizer-phase call (`zero_grad`, before
    the backward)."""
    device = next(iter(DEVICE_OPS))
    bounds = np.array([0, 10, 30, 50, 70, 78])  # setup, three whole steps, a partial one
    backward, optimizer = np.zeros(78, dtype=bool), np.zeros(78, dtype=bool)
    for start in (10, 30, 50, 70):
        optimizer[start] = True  # zero_grad
        backward[start + 10 : start + 16] = True
        optimizer[start + 16 : start + 20] = start < 70  # the step, not in the last
    backward[76:] = True  # stopped mid-backward
    calls = np.full(78, device)
    assert _steady(bounds, calls, "ops", None, backward, optimizer).steady.tolist() == [1, 2, 3]
    backward[76:] = False  # a forward and a backward, no step
    assert _steady(bounds, calls, "ops", None, backward, optimizer).steady.tolist() == [1, 2, 3]
    # the OLMo-core shape, with no step after the last backward: iteration 1, not the partial one
    bounds = np.array([0, 10, 50, 65])
    backward, optimizer = np.zeros(65, dtype=bool), np.zeros(65, dtype=bool)
    backward[30:45] = backward[55:65] = True
    optimizer[10] = optimizer[45:50] = optimizer[50] = True
    assert _steady(bounds, np.full(65, device), "ops", None, backward, optimizer).steady.tolist() == [1]


def test_without_optimizer_calls_a_short_last_iteration_is_partial():
    """A trace with no optimizer-phase call at all says nothing about where a step ends: a short last iteration is
    dropped, backward or not (a short trailing one without a backward, teardown, always is)."""
    device = next(iter(DEVICE_OPS))
    bounds = np.array([0, 10, 50, 65])
    backward, optimizer = np.zeros(65, dtype=bool), np.zeros(65, dtype=bool)
    backward[30:50] = backward[58:65] = True
    assert _steady(bounds, np.full(65, device), "ops", None, backward, optimizer).steady.tolist() == [1]
    assert _steady(bounds, np.full(65, device), "ops", None, backward).steady.tolist() == [1]
    optimizer[45:50] = True
    backward[55:65] = False  # teardown: no backward in it
    assert _steady(bounds, np.full(65, device), "ops", None, backward, optimizer).steady.tolist() == [1]
