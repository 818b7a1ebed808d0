"""`RankTrace.call_ops`: each call's op by position, as `drop_duplicates("op_id")` and a lookup by `op_id` give it,
looked up again when the calls or ops are replaced."""

import numpy as np
import pandas as pd
import pytest

from maya.simulator.iterations import call_iterations, evaluating
from maya.simulator.trace import RankTrace


def trace_of(calls: pd.DataFrame, ops: pd.DataFrame) -> RankTrace:
    return RankTrace(0, calls, ops, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())


def test_call_ops_equals_the_lookup_by_op_id_with_repeated_ops_and_calls_without_one():
    ops = pd.DataFrame(
        {"op_id": [5, 3, 5, 9], "phase": ["forward", "eval", "backward", "eval"], "iteration": [0, 0, 1, 1]}
    )
    calls = pd.DataFrame({"op_id": pd.array([3, None, 5, 9, 7, 5, 3], dtype="Int64").astype("float64")})
    trace = trace_of(calls, ops)
    first, where = trace.call_ops()
    expected = ops.drop_duplicates("op_id")
    assert first.tolist() == expected.index.tolist()
    assert where.tolist() == pd.Index(expected["op_id"]).get_indexer(calls["op_id"]).tolist() == [1, -1, 0, 2, -1, 0, 1]
    phase = pd.Series(expected["phase"].to_numpy(), index=expected["op_id"].to_numpy())
    assert evaluating(trace).tolist() == (calls["op_id"].map(phase) == "eval").tolist()
    assert trace.distinct_ops(["op_id", "phase"]).equals(ops[["op_id", "phase"]].drop_duplicates("op_id"))


def test_call_ops_is_looked_up_again_when_the_calls_are_replaced():
    ops = pd.DataFrame({"op_id": [1, 2, 3], "phase": ["forward"] * 3, "iteration": [0, 1, 2]})
    trace = trace_of(pd.DataFrame({"op_id": [1.0, 2.0, 3.0, 3.0]}), ops)
    assert call_iterations(trace).tolist() == [0, 1, 2, 2]
    trace.calls = trace.calls.iloc[::-1].reset_index(drop=True)  # as a cut or a re-target replaces them
    assert trace.call_ops()[1].tolist() == [2, 2, 1, 0]
    assert call_iterations(trace).tolist() == [2, 2, 2, 2]
    assert np.array_equal(trace.distinct_ops(["op_id"]).index, ops.index)


def test_a_null_phase_is_not_an_evaluation_in_a_nullable_string_column():
    ops = pd.DataFrame({"op_id": [1, 2, 3], "phase": pd.array(["eval", None, "forward"], dtype="string")})
    trace = trace_of(pd.DataFrame({"op_id": [2.0, 1.0, 3.0, np.nan]}), ops)
    assert evaluating(trace).tolist() == [False, True, False, False]


@pytest.mark.slow
def test_replacing_the_calls_releases_the_old_frame_and_the_lookup_is_read_only():
    import gc
    import weakref

    ops = pd.DataFrame({"op_id": [1, 2], "phase": ["forward"] * 2, "iteration": [0, 1]})
    trace = trace_of(pd.DataFrame({"op_id": [1.0, 2.0]}), ops)
    first, where = trace.call_ops()
    assert not first.flags.writeable and not where.flags.writeable
    old = weakref.ref(trace.calls)
    trace.calls = pd.DataFrame({"op_id": [2.0]})  # as a cut replaces them, before the next lookup
    gc.collect()
    assert old() is None
    assert trace.call_ops()[1].tolist() == [1]
