"""`benchmarks/band_calibration.py`: the shipped band widths re-derive from the rows shipped beside them.

A suite left out never shapes its own band; stored and re-predicted rows give back their residual band and the
prediction's properties `band_by_property.py` reads."""

import math
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module

from maya.simulator.discrepancy import MISS, shipped_discrepancy, shipped_path
from maya.validation.store import RowKey, RowResult, save
from maya_trace_spec import synthetic


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
    table, _ = calibration.left_out(rows, "gpu", None)
    assert {
        r.gpu: [r.rows, r.coverage_pct, r.median_width_pct, r.below_pct, r.above_pct] for r in table.itertuples()
    } == (shipped.provenance["left_out_gpu"])


def test_the_shipped_rows_are_each_row_once_with_every_column(calibration, rows):
    """Each (suite, row) once, nothing missing: the properties band_by_property reads included."""
    assert not rows.duplicated(["suite", "row"]).any()
    columns = [*calibration.COLUMNS, "apriori_low", "apriori_high", *calibration.PROPERTY_COLUMNS]
    assert not rows[columns].isna().any().any()


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


@pytest.mark.slow
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


def _stored_row(warehouse, kind="llm-foundry", row=7, command_hash="abc", gpus=8):
    band = {"discrepancy": {"low": 0.1, "high": 0.1, "residual_scale": 0.5}, "apriori": [0.02, 0.03]}
    band |= {"residual_low_ns": 0.8e9, "residual_high_ns": 1.3e9, "shares": {"collectives: inter-node": 0.05}}
    result = RowResult(
        suite=kind, suite_digest="d", kind=kind, key=RowKey(row, f"row {row}", "a100_80gb", "1b", gpus, 1.1),
        estimator_version="v1", predictor_digest="p", status="ok", predicted_s=1.0, band_low_s=0.85,
        band_high_s=1.2, details={"band": band, "breakdown_s": {"compute": 0.8, "exposed_comm": 0.2}},
        hardware="a100-sxm-80gb", cluster="dgx-a100", command_hash=command_hash,
    )  # fmt: skip
    save(result, warehouse)


@pytest.mark.slow
def test_stored_rows_carry_the_predictions_properties(calibration, tmp_path):
    """GPUs as stored, nodes from the cached trace's GPUs per node (2 here: 8 GPUs span 4), the exposed
    communication over the step, the band's inter-node share; a row whose trace is gone has no node count."""
    warehouse = tmp_path / "w.duckdb"
    synthetic.write_run(tmp_path / "validation" / "traces" / "abc", world_size=2, calls_per_rank=20, ops_per_rank=5)
    _stored_row(warehouse)
    _stored_row(warehouse, row=8, command_hash="gone")
    with_trace, without = calibration.warehouse_rows(warehouse)
    assert {k: with_trace[k] for k in calibration.PROPERTY_COLUMNS} == {
        "gpus": 8, "nodes": 4, "exposed_comm_share": 0.2, "inter_node_share": 0.05
    }  # fmt: skip
    assert math.isnan(without["nodes"]) and without["gpus"] == 8


@pytest.mark.slow
def test_repredict_predicts_each_stored_row_from_its_cached_trace(calibration, tmp_path, monkeypatch, capsys):
    """`--repredict`: each selected stored row predicted again from its trace with the options it was stored with
    (hardware, cluster, estimator version, a band), measured as stored; a NeuSight row is read as stored."""
    warehouse = tmp_path / "w.duckdb"
    trace = tmp_path / "validation" / "traces" / "abc"
    synthetic.write_run(trace, world_size=2, calls_per_rank=20, ops_per_rank=5)
    for row in (7, 8):
        _stored_row(warehouse, row=row)
    _stored_row(warehouse, kind="neusight", row=3, gpus=1)
    asked = []
    band = {"low_ns": 1.9e9, "high_ns": 2.4e9, "residual_low_ns": 1.95e9, "residual_high_ns": 2.2e9}
    band |= {"apriori": [0.0, 0.0], "shares": {"collectives: inter-node": 0.1}, "meaning": "not kept"}

    def predict(run_dir, options):
        asked.append((run_dir, options))
        breakdown = {"compute": 1500.0, "exposed_comm": 500.0}
        return SimpleNamespace(iteration_ns=2e9, band=band, to_dict=lambda per_rank: {"breakdown_ms": breakdown})

    monkeypatch.setattr("maya.api.predict", predict)
    rows = calibration.repredicted_rows(warehouse, ["llm-foundry=row == 7", "neusight=row == 3"])
    ((run_dir, options),) = asked
    assert run_dir == trace and (options.hardware, options.cluster, options.estimator_version) == (
        "a100-sxm-80gb", "dgx-a100", "v1"
    )  # fmt: skip
    assert options.band and options.durations == "estimators" and options.warehouse == warehouse
    again, neusight = rows
    assert (again["row"], again["predicted"], again["measured"], again["low"], again["high"]) == (7, 2.0, 1.1, 1.9, 2.4)
    assert (again["residual_low"], again["exposed_comm_share"], again["inter_node_share"]) == (1.95, 0.25, 0.1)
    assert (again["nodes"], "--repredict" in again["source"]) == (4, True)
    assert (neusight["suite"], neusight["predicted"], neusight["source"]) == ("neusight", 1.0, str(warehouse))
    assert "neusight row 3: not a step: as stored" in capsys.readouterr().out
