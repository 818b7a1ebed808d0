"""`benchmarks/band_by_property.py`: a width that follows a property of the prediction beats a scalar one.

Normalised split conformal covers rows whose error grows with the property where one scalar width cannot; a suite
left out never shapes its own widths; a property, a residual band or a second group the rows lack is named; and a
line of |log error| through zero gives a bounded slope."""

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module


@pytest.fixture(scope="module")
def by_property():
    return benchmark_module("band_by_property")


def synthetic(n: int, seed: int) -> pd.DataFrame:
    """Rows whose log error spreads 4% on one node and 4% x (1 + log2 nodes) on more: no residual band to lean on."""
    rng = np.random.default_rng(seed)
    nodes = rng.choice([1, 1, 1, 4, 16, 64], n)
    error = rng.normal(0, 0.04 * (1 + np.log2(nodes)))
    predicted = np.ones(n)
    return pd.DataFrame(
        {
            "suite": "s",
            "gpu": "g",
            "row": np.arange(n),
            "predicted": predicted,
            "measured": np.exp(error),
            "residual_low": predicted,
            "residual_high": predicted,
            "apriori_low": 0.0,
            "apriori_high": 0.0,
            "nodes": nodes,
        }
    )


def coverage(rows, low, high, mask):
    return float(((low <= rows["measured"]) & (rows["measured"] <= high))[mask].mean())


def test_a_width_by_nodes_covers_each_span_where_a_scalar_one_cannot(by_property):
    calibration, new = synthetic(1000, 0), synthetic(4000, 1)
    one, many = (new["nodes"] == 1).to_numpy(), (new["nodes"] == 64).to_numpy()
    scalar = by_property.widths_for(calibration, None, 0.0)
    by_nodes = by_property.widths_for(calibration, "nodes", 0.0)
    assert scalar[3] == 0.0 and 0.5 < by_nodes[3] < 2  # beta: the spread's growth per doubling, 1 here
    low, high = by_property.band_of(new, None, scalar)
    assert coverage(new, low, high, many) < 0.6 and coverage(new, low, high, one) > 0.97  # one width fits neither
    low, high = by_property.band_of(new, "nodes", by_nodes)
    for span in (one, many):
        assert 0.7 < coverage(new, low, high, span) < 0.9
    assert np.median((high - low)[one]) < np.median(np.subtract(*by_property.band_of(new, None, scalar)[::-1])[one])


def test_a_suite_left_out_never_shapes_its_own_widths(by_property):
    rows = pd.concat([synthetic(200, 2).assign(suite="a"), synthetic(200, 3).assign(suite="b")], ignore_index=True)
    moved = rows.copy()
    mine = moved["suite"] == "a"
    moved.loc[mine, "measured"] *= np.exp(np.linspace(-0.5, 0.5, mine.sum()))
    before = by_property.left_out(rows, "suite", "nodes")[2]
    after = by_property.left_out(moved, "suite", "nodes")[2]
    assert before["a"] == after["a"]
    assert after["b"] != before["b"]  # b's widths are calibrated on a's rows, which moved


def test_b_s_widths_stay_when_nothing_moves(by_property):
    """The check above can fail: with a's rows unmoved, b's widths are the same on a second calibration."""
    rows = pd.concat([synthetic(200, 2).assign(suite="a"), synthetic(200, 3).assign(suite="b")], ignore_index=True)
    assert (
        by_property.left_out(rows, "suite", "nodes")[2]["b"]
        == by_property.left_out(rows.copy(), "suite", "nodes")[2]["b"]
    )


def test_a_property_the_rows_lack_is_named(by_property):
    rows = synthetic(10, 4)
    with pytest.raises(ValueError, match="exposed_comm_share"):
        by_property.widths_for(rows, "exposed_comm_share", 0.0)
    with pytest.raises(ValueError, match="no property 'colour'"):
        by_property.feature(rows, "colour")


def test_a_line_through_zero_gives_a_bounded_slope(by_property):
    """|log error| = 0.02 x exactly: intercept 0, so beta is the slope over the floored intercept (a tenth of the
    mean |log error|), not over 1e-3 (beta 20)."""
    x = np.tile(np.arange(7.0), 20)
    rows = synthetic(len(x), 5).assign(measured=np.exp(0.02 * x * np.resize([1, -1], len(x))))
    beta = by_property.slope(rows, x)
    assert beta == pytest.approx(0.02 / (by_property.INTERCEPT_FLOOR * 0.02 * x.mean()))
    assert beta < 4  # 1 + beta x stays within 25x at x = 6


def test_rows_without_a_residual_band_or_a_second_group_are_named(by_property):
    rows = synthetic(50, 6)
    rows.loc[3, "residual_low"] = np.nan
    with pytest.raises(ValueError, match="1 rows without a residual band for residual scale 0.5 \\(e.g. s 3\\)"):
        by_property.widths_for(rows, "nodes", 0.5)
    assert by_property.widths_for(rows, "nodes", 0.0)[2] == 0.0  # scale 0 needs no residual band
    with pytest.raises(ValueError, match="only one suite \\(s\\)"):
        by_property.left_out(synthetic(50, 7), "suite", None)
