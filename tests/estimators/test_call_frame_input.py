"""Regressions found by fuzzing (tests/reliability): call frames the estimators cannot price are refused with a
`CallFrameError` naming the column and row, never another exception or an infinite, negative or absurd duration."""

import numpy as np
import pandas as pd
import pytest

from maya.estimators import CallFrameError, KernelEstimator
from maya.estimators.calls import normalize


def frame(**columns):
    return pd.DataFrame({"hardware": ["h100-sxm"] * 2, "family": ["gemm", "elementwise"], **columns})


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"m": [1024, -5]}, r"column 'm' holds 1 size\(s\) that are negative"),  # priced as a positive time
        ({"numel": [np.inf, 1.0]}, r"column 'numel' .* infinite .*row 0"),  # priced as an infinite time
        ({"k": [2.0**63, 1]}, "2\\^63 and above"),
        ({"bytes": ["12", "abc"]}, r"column 'bytes' holds values that are not numbers \(row 1: 'abc'\)"),  # ValueError
        ({"n": [[1], [2]]}, "not numbers"),
    ],
)
def test_sizes_that_are_not_sizes_are_refused(columns, message):
    with pytest.raises(CallFrameError, match=message):
        KernelEstimator().predict(frame(**columns))


def test_a_repeated_column_is_refused():
    """Two `row` columns made pandas fail deep inside normalize ("Cannot set a DataFrame with multiple columns")."""
    calls = pd.concat([frame(row=[1, 2]), pd.DataFrame({"row": [3, 4]})], axis=1)
    with pytest.raises(CallFrameError, match="column\\(s\\) row given more than once"):
        normalize(calls)


def test_only_frames_are_call_frames():
    with pytest.raises(CallFrameError, match="not dict"):
        normalize({"hardware": ["h100-sxm"], "family": ["gemm"]})


def test_absent_sizes_stay_unpriced_and_numeric_text_still_reads():
    priced = KernelEstimator().predict(frame(m=["1024", None], n=[1024, None], k=[1024, None], numel=[None, 4096]))
    assert np.isfinite(priced["duration_ns"]).all() and (priced["duration_ns"] > 0).all()
    assert np.isnan(KernelEstimator().predict(frame())["duration_ns"].iloc[0])  # a GEMM without its shape
