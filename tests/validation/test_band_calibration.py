"""`benchmarks/band_calibration.py`: the shipped band widths re-derive from the rows shipped beside them, a suite
left out never shapes its own band, and stored rows give back their residual band."""

import math
import sys

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module

from maya.simulator.discrepancy import MISS, shipped_discrepancy, shipped_path
from maya.validation.store import RowKey, RowResult, save


@pytest.fixture(scope="module")
def calibration():
    return benchmark_module("band_calibration")


@pytest.fixture(scope="module")
def rows(calibration):
    return pd.read_csv(shipped_path().parent / calibration.ROWS_FILE.name)


def test_the_shipped_widths_are_those_of_the_shipped_rows(calibration, rows):
    shipped = shipped_discrepancy()
    widths = calibration.shipped_widths(calibration.widths_for(rows, None))
    assert widths == (shipped.low, shipped.high, shipped.residual_scale)
    table, _ = calibration.left_out(rows, "suite", None)
    for r in table.itertuples():
        stored = shipped.provenance["left_out"][f"{r.suite}/{r.gpu}"]
        assert stored == [r.rows, r.coverage_pct, r.median_width_pct, r.below_pct, r.above_pct]
        assert r.coverage_pct + r.below_pct + r.above_pct == pytest.approx(100, abs=0.2)  # each rounded to 0.1
    assert shipped.provenance["rows"] == len(rows) and rows["suite"].nunique() >= 2


def test_a_suite_left_out_never_shapes_its_own_band(calibration, rows):
    suite = "llm-foundry"
    moved = rows.copy()
    mine = moved["suite"] == suite
    moved.loc[mine, "measured"] = moved.loc[mine, "measured"] * np.exp(np.linspace(-0.5, 0.5, mine.sum()))
    before = calibration.left_out(rows, "suite", None)[1][suite]
    after = calibration.left_out(moved, "suite", None)[1][suite]
    assert before == after  # its own errors moved by up to +-65%: its widths come from the others alone
    assert calibration.widths_for(moved, None) != calibration.widths_for(rows, None)  # in sample they move


def test_the_shipped_widths_still_cover_the_rows_they_were_calibrated_on(calibration, rows):
    """Rounded outward, the shipped widths leave no more rows outside either side than the conformal rank
    allows (rounded to nearest, a row needing 0.050420 fell outside 0.0504 by 9e-6)."""
    widths = calibration.widths_for(rows, None)
    shipped = calibration.shipped_widths(widths)
    assert shipped[0] >= widths[0] and shipped[1] >= widths[1] and shipped[0] - widths[0] < 1e-4
    n = len(rows)
    allowed = n - math.ceil((n + 1) * (1 - MISS))
    for w in (widths, shipped):
        low, high = calibration.band_of(rows, w)
        assert (rows["measured"] > high).sum() <= allowed and (rows["measured"] < low).sum() <= allowed


def test_rows_without_a_measurement_are_left_out_and_counted(calibration, rows, tmp_path, monkeypatch, capsys):
    """A row with no measurement (NaN, 0) is dropped with a count, and the rest calibrate as without it."""
    path = tmp_path / "rows.csv"
    broken = rows.head(2).assign(measured=[np.nan, 0.0], row=[9001, 9002])
    pd.concat([rows, broken]).assign(recorded="2026-11-29").to_csv(path, index=False)
    monkeypatch.setattr(sys, "argv", ["band_calibration.py", "--rows-file", str(path)])
    calibration.main()
    out = capsys.readouterr().out
    assert f"2 of {len(rows) + 2} rows have no measurement" in out
    widths = calibration.shipped_widths(calibration.widths_for(rows, None))
    assert f"as shipped, all -{widths[0]:.3f}/+{widths[1]:.3f}" in out


def test_stored_rows_give_back_their_residual_band_and_apriori_widths(calibration, tmp_path):
    warehouse = tmp_path / "w.duckdb"
    band = {"discrepancy": {"low": 0.1, "high": 0.1, "residual_scale": 0.5}, "apriori": [0.02, 0.03]}
    band |= {"residual_low_ns": 0.8e9, "residual_high_ns": 1.3e9}
    result = RowResult(
        suite="s", suite_digest="d", kind="llm-foundry", key=RowKey(7, "row 7", "a100_80gb", "1b", 8, 1.1),
        estimator_version="v1", predictor_digest="p", status="ok", predicted_s=1.0, band_low_s=0.85,
        band_high_s=1.2, details={"band": band},
    )  # fmt: skip
    save(result, warehouse)
    (row,) = calibration.warehouse_rows(warehouse)
    assert (row["residual_low"], row["residual_high"]) == (0.8, 1.3)
    assert (row["apriori_low"], row["apriori_high"]) == (0.02, 0.03)
    assert (row["low"], row["high"], row["measured"]) == (0.85, 1.2, 1.1)
