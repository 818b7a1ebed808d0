"""The band's calibrated width: base widths (scaled residuals, a-priori proxy widths), the discrepancy in
quadrature, split conformal calibration, what the band says it is, the shipped file."""

import json
import math

import numpy as np
import pytest

from maya.simulator.discrepancy import (
    Discrepancy,
    apriori_widths,
    band,
    base_widths,
    calibrate,
    shipped_discrepancy,
)


def test_the_band_adds_the_discrepancy_in_quadrature_to_the_larger_base_width():
    # residual band 90..120 around 100, scaled by 0.5; a-priori 0.2 below
    low, high = band(100.0, 90.0, 120.0, 0.2, 0.0, 0.1, 0.3, 0.5)
    assert low == pytest.approx(100 * math.exp(-math.hypot(0.2, 0.1)))  # a-priori > 0.5 x log(100/90)
    assert high == pytest.approx(100 * math.exp(math.hypot(0.5 * math.log(1.2), 0.3)))
    # residual scale 1, nothing else: the residual band itself
    assert band(100.0, 90.0, 120.0, 0.0, 0.0, 0.0, 0.0, 1.0) == pytest.approx((90.0, 120.0))
    # residual scale 0: the discrepancy alone, whatever the residuals
    assert band(100.0, 50.0, 300.0, 0.0, 0.0, 0.1, 0.2, 0.0) == pytest.approx(
        (100 * math.exp(-0.1), 100 * math.exp(0.2))
    )


def test_apriori_widths_move_the_proxied_share_by_its_stated_uncertainty():
    below, above = apriori_widths({0.2: 0.5})  # half the iteration priced from a proxy, +-20%
    assert math.exp(above) == pytest.approx(1 + 0.5 * 0.2)  # the proxied half 1.2x slower
    assert math.exp(-below) == pytest.approx(0.5 + 0.5 / 1.2)  # ... or 1.2x faster
    assert apriori_widths({}) == (0.0, 0.0)


def test_calibration_covers_the_calibration_rows_and_holds_on_exchangeable_new_ones():
    rng = np.random.default_rng(0)
    predicted = np.ones(4000)
    measured = np.exp(rng.normal(0.15, 0.1, 4000))  # predictions 15% too fast, +-10% spread
    base = np.full(4000, 0.03)  # base band far too narrow
    d_low, d_high = calibrate(predicted[:2000], measured[:2000], base[:2000], base[:2000])
    assert d_high > 0.2 and d_low == 0.0  # only the side the truth falls on widens
    new_low, new_high = band(predicted[2000:], predicted[2000:], predicted[2000:], 0.03, 0.03, d_low, d_high, 0.0)
    above = (measured[2000:] > new_high).mean()
    assert 0.07 < above < 0.13 and (measured[2000:] < new_low).mean() < 0.13


def test_calibration_of_a_covering_band_adds_nothing():
    predicted = np.ones(10)
    assert calibrate(predicted, predicted * 1.1, np.full(10, 0.7), np.full(10, 0.7)) == (0.0, 0.0)


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="at least one row"):
        calibrate([], [], [], [])
    with pytest.raises(ValueError, match="positive"):
        calibrate([1.0], [0.0], [0.1], [0.1])
    with pytest.raises(ValueError, match=">= 0"):
        Discrepancy(-0.1, 0.2)
    with pytest.raises(ValueError, match="residual_scale"):
        Discrepancy(0.1, 0.2, float("nan"))
    with pytest.raises(ValueError, match="format"):
        Discrepancy.from_json({"format": "maya-band-discrepancy/1", "low": 0, "high": 0})


def test_shipped_widths_name_their_calibration_and_check():
    shipped = shipped_discrepancy()
    p = shipped.provenance
    assert p["calibrated_on"] and p["rows"] >= 1 and p["written"]
    assert p["left_out"], "the widths were never judged on suites they were not calibrated on"
    assert p["calibrated_on"] in shipped.meaning
    assert Discrepancy.from_json(json.loads(json.dumps(shipped.to_json()))) == shipped


def test_at_residual_scale_0_a_row_without_a_residual_band_keeps_its_apriori_width():
    """Residual scale 0 ignores the residual band, so a row without one (NaN) gets its a-priori width, not NaN:
    calibration and the band it gives judge that row alike."""
    predicted, measured = np.array([1.0, 1.0, 1.0]), np.array([1.3, 1.05, 0.9])
    nan = np.full(3, np.nan)
    apriori = np.array([0.0, 0.1, 0.0])
    below, above = base_widths(predicted, nan, nan, apriori, apriori, 0.0)
    assert np.array_equal(below, apriori) and np.array_equal(above, apriori)
    d_low, d_high = calibrate(predicted, measured, below, above, miss=0.0)
    assert d_high == pytest.approx(math.log(1.3)) and d_low == pytest.approx(-math.log(0.9))
    low, high = band(predicted, nan, nan, apriori, apriori, d_low, d_high, 0.0)
    assert np.isfinite(low).all() and np.isfinite(high).all()
    assert ((low <= measured * (1 + 1e-12)) & (measured <= high * (1 + 1e-12))).all()
