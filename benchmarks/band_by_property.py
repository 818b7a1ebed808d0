"""Whether a band whose width follows a property of the prediction beats one scalar width, left out.

The shipped band adds one model-discrepancy width per side to every prediction (`maya.simulator.discrepancy`). This
script judges the alternative where that width grows with a property the prediction itself knows: normalised split
conformal (Lei et al. 2018, "Distribution-free predictive inference for regression", section 5.2). Per row a spread
s = 1 + beta x, with x the property (log2 of a count, or a share of the step as it is); beta = max(b, 0) / a from the
least-squares line a + b x of |log(measured / predicted)| on the calibration rows (scikit-learn's
`LinearRegression`), its intercept a floored at `INTERCEPT_FLOOR` of the mean |log error|; then the split-conformal
widths of the needed width divided by s, so a row's discrepancy is d x s. Three calibrated parameters (d_low, d_high,
beta), with the residual scale chosen as `band_calibration.py` chooses it. Lei et al. fit the spread on a split of
its own; here beta and the quantile come from the same rows, so the 10%-a-side guarantee is approximate. Nothing is
fitted to a point prediction and no suite's label or measured time enters the width.

Reads the calibration rows (`data/band/calibration_rows.csv` or `--rows-file`) with the property columns
`band_calibration.py --write` keeps (`PROPERTIES`), and prints, left out by suite and by GPU, coverage, % below and
above, and median width per suite/GPU and per suite/node span for the scalar widths and for the width by each
property.

Usage: python benchmarks/band_by_property.py [--rows-file CSV] [--by PROPERTY ...]
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LinearRegression

from maya.simulator.discrepancy import base_widths, calibrate, shipped_path

_spec = importlib.util.spec_from_file_location("band_calibration", Path(__file__).with_name("band_calibration.py"))
band_calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(band_calibration)

PROPERTIES = {
    "nodes": "log2 of the nodes the job spans",
    "gpus": "log2 of the GPUs",
    "exposed_comm_share": "share of the step in exposed communication",
    "inter_node_share": "share of the step in inter-node collectives",
}
"""Properties the width may follow: each is known to `maya predict` for every run (none reads a suite or a
measurement)."""
INTERCEPT_FLOOR = 0.1
"""The least-squares line's intercept is floored at this fraction of the rows' mean |log error|: a line through
about 0 at x = 0 would otherwise make beta = b / a unbounded (an intercept of 1e-5 with a slope of 0.02: beta 2000)."""


def feature(rows: pd.DataFrame, prop: str | None) -> np.ndarray:
    """The property x of each row (0 for the scalar widths): log2 of a count, a share as it is."""
    if prop is None:
        return np.zeros(len(rows))
    if prop not in PROPERTIES:
        raise ValueError(f"no property {prop!r}: expected one of {', '.join(PROPERTIES)}")
    if prop not in rows or rows[prop].isna().any():
        raise ValueError(f"calibration rows without a {prop!r} column for every row: re-predict them")
    x = rows[prop].to_numpy(dtype="float64")
    return np.log2(x) if prop in ("nodes", "gpus") else x


def slope(rows: pd.DataFrame, x: np.ndarray) -> float:
    """beta: how much the spread grows per unit of x, from the line of |log error| on x (0 when it does not grow).

    The line's slope over its intercept, the intercept floored at `INTERCEPT_FLOOR` of the mean |log error|."""
    error = np.abs(np.log(rows["measured"] / rows["predicted"])).to_numpy()
    if not np.ptp(x) or not error.any():
        return 0.0
    line = LinearRegression().fit(x[:, None], error)
    return max(float(line.coef_[0]), 0.0) / max(float(line.intercept_), INTERCEPT_FLOOR * float(error.mean()))


def widths_for(rows: pd.DataFrame, prop: str | None, scale: float | None) -> tuple[float, float, float, float]:
    """(d_low, d_high, residual scale, beta) calibrated on `rows`.

    Per side the split-conformal width of the need divided by the spread (`calibrate` on the log error and base
    widths divided by it: the same quantile); scale None: of `band_calibration.SCALES` the one whose band is
    narrowest on these rows. A row without the base widths the scale needs (no residual band stored) is an
    error."""
    if scale is None:
        found = [widths_for(rows, prop, s) for s in band_calibration.SCALES]
        return min(
            found, key=lambda w: float(np.median(np.subtract(*band_of(rows, prop, w)[::-1]) / rows["predicted"]))
        )
    x = feature(rows, prop)
    beta = slope(rows, x)
    spread = 1 + beta * x
    predicted = rows["predicted"].to_numpy(dtype="float64")
    below, above = base_widths(
        predicted, rows["residual_low"], rows["residual_high"], rows["apriori_low"], rows["apriori_high"], scale
    )
    missing = np.isnan(below) | np.isnan(above)
    if missing.any():
        named = ", ".join(f"{r.suite} {r.row}" for r in rows[missing].head(5).itertuples())
        raise ValueError(f"{missing.sum()} rows without a residual band for residual scale {scale:g} (e.g. {named})")
    error = np.log(rows["measured"].to_numpy(dtype="float64") / predicted)
    d_low, d_high = calibrate(predicted, predicted * np.exp(error / spread), below / spread, above / spread)
    return d_low, d_high, scale, beta


def band_of(rows: pd.DataFrame, prop: str | None, widths: tuple[float, float, float, float]):
    """The band of `rows` with discrepancy d x (1 + beta x) per side."""
    d_low, d_high, scale, beta = widths
    spread = 1 + beta * feature(rows, prop)
    return band_calibration.band(
        rows["predicted"],
        rows["residual_low"],
        rows["residual_high"],
        rows["apriori_low"],
        rows["apriori_high"],
        d_low * spread,
        d_high * spread,
        scale,
    )


def left_out(rows: pd.DataFrame, key: str, prop: str | None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Each group of `key` (suite or gpu) banded with widths calibrated on the other groups' rows.

    Returns (low, high) per row and the widths per group; one group alone has nothing to calibrate on (an error)."""
    low, high = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    widths = {}
    for group in sorted(rows[key].unique()):
        mine = (rows[key] == group).to_numpy()
        if mine.all():
            raise ValueError(f"only one {key} ({group}): nothing to calibrate on when it is left out")
        widths[group] = widths_for(rows[~mine], prop, None)
        low[mine], high[mine] = band_of(rows[mine], prop, widths[group])
    return low, high, widths


def span(rows: pd.DataFrame) -> pd.Series:
    """The nodes a row's job spans, binned as the MPT figures are (1, 2-8, 16-64 nodes)."""
    return pd.cut(rows["nodes"], [0, 1, 8, 64], labels=["1 node", "2-8 nodes", "16-64 nodes"]).astype(str)


def main() -> None:
    """Print the left-out coverage and width of the scalar band and of the band by each property."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="properties: " + "; ".join(f"{k}: {v}" for k, v in PROPERTIES.items()),
    )
    parser.add_argument("--rows-file", type=Path, default=shipped_path().parent / band_calibration.ROWS_FILE.name)
    parser.add_argument("--by", action="append", choices=list(PROPERTIES), help="property, repeatable (default all)")
    args = parser.parse_args()
    rows = pd.read_csv(args.rows_file).sort_values(["suite", "row"]).reset_index(drop=True)
    rows = band_calibration.measured_rows(rows)
    pd.set_option("display.width", 250)
    rows["span"] = span(rows)
    try:
        judge(rows, args.by or list(PROPERTIES))
    except ValueError as e:
        raise SystemExit(f"{args.rows_file}: {e}") from None


def judge(rows: pd.DataFrame, properties: list[str]) -> None:
    """Print, left out by suite and by GPU, the scalar widths' and each property's band per suite/GPU and span."""
    columns = ["rows", "coverage_pct", "below_pct", "above_pct", "median_width_pct"]
    for key in ("suite", "gpu"):
        by_gpu, by_span = {}, {}
        for prop in [None, *properties]:
            low, high, widths = left_out(rows, key, prop)
            name = prop or "scalar"
            by_gpu[name] = band_calibration.table(rows, low, high).set_index(["suite", "gpu"])[columns]
            by_span[name] = band_calibration.table(rows, low, high, ["suite", "span"]).set_index(["suite", "span"])
            by_span[name] = by_span[name][columns]
            pooled = {g: f"-{w[0]:.3f}/+{w[1]:.3f} x{w[2]:g} beta {w[3]:.2f}" for g, w in widths.items()}
            print(f"leave one {key} out, {name}: {pooled}")
        for what, judged in (("suite/GPU", by_gpu), ("suite/nodes", by_span)):
            print(f"\nLeave one {key} out: rows, coverage %, below %, above %, median width % per {what}")
            print(pd.concat(judged, axis=1).to_string(), "\n")


if __name__ == "__main__":
    main()
