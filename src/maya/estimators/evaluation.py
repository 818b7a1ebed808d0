"""Accuracy of predictions against measurements: mean absolute percentage error, overall and by group."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_percentage_error

from .launch_floor import ISOLATED


def mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Mean of |predicted - measured| / measured (a fraction: 0.1 is 10%)."""
    if len(measured) == 0:
        return float("nan")
    return float(mean_absolute_percentage_error(measured, predicted))


def comparable_ns(predicted: pd.DataFrame, timing: pd.Series | np.ndarray) -> np.ndarray:
    """Per call, the prediction to compare with its measurement: what a call timed on its own reads
    (`isolated_ns`) where it was measured so, else its device time."""
    return np.where(np.asarray(timing) == ISOLATED, predicted["isolated_ns"], predicted["duration_ns"])


def mape_table(
    frame: pd.DataFrame,
    by: str,
    measured: str = "measured_ns",
    predictions: tuple[str, ...] = ("duration_ns", "roofline_ns"),
) -> pd.DataFrame:
    """Rows, MAPE of each prediction column and the share of each method, per value of `by` and overall."""

    def summary(group: pd.DataFrame) -> dict:
        row = {"rows": len(group)}
        row.update({f"mape_{p}": mape(group[measured].to_numpy(), group[p].to_numpy()) for p in predictions})
        if "method" in group:
            row.update(group["method"].value_counts(normalize=True).add_prefix("share_").to_dict())
        return row

    table = pd.DataFrame({key: summary(group) for key, group in frame.groupby(by, sort=True)}).T
    table.loc["overall"] = pd.Series(summary(frame))
    return table.fillna({c: 0.0 for c in table.columns if c.startswith("share_")})
