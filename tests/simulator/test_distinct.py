"""`distinct.per_distinct` and `contains`: per-call answers computed once per distinct value, equal to pandas' string
methods call by call (nulls included)."""

import numpy as np
import pandas as pd

from maya.simulator.distinct import contains, per_distinct


def test_per_distinct_calls_once_per_value_and_keeps_the_order():
    values = pd.Series(["b_x", "a", None, "b_x", np.nan, "a", "b_x"], dtype=object)
    seen = []
    got = per_distinct(values, lambda v: seen.append(v) or v.split("_")[0], "missing")
    assert got.tolist() == ["b", "a", "missing", "b", "missing", "a", "b"]
    assert sorted(seen) == ["a", "b_x"]  # the nulls are never passed to the function


def test_contains_equals_str_contains_on_object_and_arrow_strings():
    texts = ['{"triton": 1}', None, "plain", '{"triton": 1}', '{"elements": 4}', ""] * 3
    for values in (pd.Series(texts, dtype=object), pd.Series(texts, dtype="str")):
        for needle in ('"triton"', '"elements"', "p"):
            expected = values.str.contains(needle, regex=False).fillna(False).to_numpy(dtype=bool)
            got = contains(values, needle)
            assert got.dtype == bool and got.tolist() == expected.tolist()
