"""Model discrepancy of the band: widening in quadrature, its inverse, split conformal calibration, the file."""

import json

import numpy as np
import pytest

from maya.simulator.discrepancy import Discrepancy, calibrate, narrow, shipped_discrepancy, widen


def test_widen_adds_in_quadrature_and_narrow_inverts_it():
    low, high = widen(100.0, 90.0, 120.0, 0.2, 0.0)
    assert high == pytest.approx(120.0)  # no width above: the residual band's edge
    assert low == pytest.approx(100.0 * np.exp(-np.hypot(np.log(100 / 90), 0.2)))
    lows, highs = widen(np.array([1.0, 2.0]), np.array([0.9, 2.0]), np.array([1.1, 2.4]), 0.1, 0.3)
    back = narrow(np.array([1.0, 2.0]), lows, highs, 0.1, 0.3)
    assert back[0] == pytest.approx([0.9, 2.0]) and back[1] == pytest.approx([1.1, 2.4])


def test_calibration_covers_the_calibration_rows_and_holds_on_exchangeable_new_ones():
    rng = np.random.default_rng(0)
    predicted = np.ones(4000)
    measured = np.exp(rng.normal(0.15, 0.1, 4000))  # predictions 15% too fast, +-10% spread
    low, high = predicted * 0.97, predicted * 1.03  # residual band far too narrow
    d_low, d_high = calibrate(predicted[:2000], low[:2000], high[:2000], measured[:2000])
    assert d_high > 0.2 and d_low == 0.0  # only the side the truth falls on widens
    new_low, new_high = widen(predicted[2000:], low[2000:], high[2000:], d_low, d_high)
    above = (measured[2000:] > new_high).mean()
    assert 0.07 < above < 0.13 and (measured[2000:] < new_low).mean() < 0.13


def test_calibration_of_a_covering_band_adds_nothing():
    predicted = np.ones(10)
    assert calibrate(predicted, predicted * 0.5, predicted * 2, predicted * 1.1) == (0.0, 0.0)


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="at least one row"):
        calibrate([], [], [], [])
    with pytest.raises(ValueError, match=">= 0"):
        Discrepancy(-0.1, 0.2)
    with pytest.raises(ValueError, match="format"):
        Discrepancy.from_json({"format": "other", "low": 0, "high": 0})


def test_shipped_widths_name_their_calibration_and_check():
    shipped = shipped_discrepancy()
    assert shipped.provenance["calibrated_on"] and shipped.provenance["rows"] >= 1
    assert shipped.provenance["checked"], "the widths were never judged on rows they were not calibrated on"
    assert Discrepancy.from_json(json.loads(json.dumps(shipped.to_json()))) == shipped
