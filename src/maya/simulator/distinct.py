"""Per-call answers computed once per distinct value: a trace's string columns (API names, launch arguments,
enclosing op names) repeat every layer and every step, so a string test or a lookup runs over the few distinct
values and is scattered back by their codes (`pd.factorize`) instead of once per call in Python."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd


def per_distinct(
    values: pd.Series | np.ndarray | Sequence, fn: Callable[[Any], Any], missing: Any = None, dtype: type | str = object
) -> np.ndarray:
    """`fn(value)` for each of `values`, called once per distinct one; `missing` where a value is null (None, NaN)."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object) if not isinstance(values, pd.Series) else values)
    return np.array([*(fn(u) for u in uniques), missing], dtype=dtype)[codes]


def contains(values: pd.Series, needle: str) -> np.ndarray:
    """Whether each string holds `needle` (False where null): `values.str.contains(needle, regex=False)`."""
    return per_distinct(values, lambda text: needle in str(text), False, bool)
