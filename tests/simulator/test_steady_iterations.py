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
