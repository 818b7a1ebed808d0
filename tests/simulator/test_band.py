"""The 10-90% band of `maya predict` on synthetic traces priced by a kernel estimator whose held-out
residual bands are known: the quantile mapping, full correlation within a family, independence across
families, collectives from the shipped held-out NCCL residuals, and no band without residuals."""

import math

import numpy as np
import pytest

from maya.estimators import KernelEstimator, Registry
from maya.estimators.efficiency_model import Band
from maya.simulator import predict
from maya.simulator.band import SAMPLES, SEED, Z90, _normal_draws, log_factor
from maya.simulator.discrepancy import NONE, Discrepancy
from maya.simulator.trace_builder import TraceBuilder

HIGH = 0.4
"""log(measured / roofline) at the 90th percentile of the stub families; the 10th is the roofline itself."""


@pytest.fixture(autouse=True)
def residuals_only(monkeypatch):
    """The tests below check the residual band: no model discrepancy unless a test sets one."""
    monkeypatch.setattr("maya.simulator.band.shipped_discrepancy", lambda: NONE)


@pytest.fixture
def warehouse(tmp_path):
    """A registered version that prices GEMMs and copies at their roofline, with a known band."""
    path = tmp_path / "warehouse.duckdb"
    estimator = KernelEstimator(roofline_bands={"gemm": Band(0.0, HIGH), "copy": Band(0.0, HIGH)})
    Registry(path).register(estimator, data_hash="stub", config_hash="stub", metrics={})
    return path


def trace(path, *, gemms: int = 3, copies: int = 0, size: int = 8192, ranks: int = 1, allreduce: int = 0):
    b = TraceBuilder(world_size=ranks, nproc_per_node=ranks)
    if ranks > 1:
        b.communicator("dp", list(range(ranks)))
    for r in range(ranks):
        k = b.rank(r)
        for iteration in range(4):
            k.iteration = iteration
            for _ in range(gemms):
                k.gemm(size, size, size // gemms, 1)
            for _ in range(copies):
                k.memcpy(1 << 30, "DtoD", 1)
            if allreduce:
                k.allreduce("dp", 1, nelems=allreduce)
            k.stream_sync()
    return b.write(path)


def band_of(path, warehouse, **kw):
    p = predict(path, durations="estimators", warehouse=warehouse, band=True, **kw)
    return p, p.band


def test_quantile_mapping():
    q = np.array([-0.2, 0.1, 0.5])
    assert log_factor(q, np.array(-Z90)) == pytest.approx(-0.2)
    assert log_factor(q, np.array(0.0)) == pytest.approx(0.1)
    assert log_factor(q, np.array(Z90)) == pytest.approx(0.5)
    assert log_factor(q, np.array(2 * Z90)) == pytest.approx(0.9)  # linear beyond the 90th percentile


@pytest.mark.parametrize(("samples", "groups", "seed"), [(SAMPLES, 7, SEED), (10, 1, 3), (257, 4, 11)])
def test_normal_draws_are_scipys_latin_hypercube(samples, groups, seed):
    """The band's draws, made without importing scipy.stats, are SciPy's stratified normal draws bit for bit."""
    from scipy.stats import norm, qmc

    expected = norm.ppf(qmc.LatinHypercube(d=groups, seed=seed).random(samples))
    assert np.array_equal(_normal_draws(samples, groups, seed), expected)


@pytest.mark.slow
def test_one_family_moves_together_whatever_its_number_of_calls(tmp_path, warehouse):
    """Errors within a family are one draw: the band of 1 GEMM and of 12 GEMMs of the same total work are
    the same share of the iteration, the family's own [roofline, roofline x e^0.4]."""
    ratios = []
    for gemms in (1, 12):
        p, band = band_of(trace(tmp_path / f"g{gemms}", gemms=gemms), warehouse)
        (share,) = band["shares"].values()
        assert list(band["shares"]) == ["kernels: gemm"] and share > 0.98  # the rest: host time, not varied
        assert band["low_ns"] == pytest.approx(p.iteration_ns, rel=1e-6)
        ratios.append(band["high_ns"] / p.iteration_ns)
        assert 1 + share * (math.exp(HIGH) - 1) - 1e-3 < ratios[-1] <= math.exp(HIGH) + 1e-6
    assert ratios[1] == pytest.approx(ratios[0], rel=0.01)


def test_families_are_independent(tmp_path, warehouse):
    """Two families of about equal time, each with the same band: their errors are drawn apart, so the
    iteration's 90th percentile lies strictly between no error and both at their 90th percentile."""
    p, band = band_of(trace(tmp_path / "mixed", gemms=2, copies=2), warehouse)
    shares = band["shares"]
    assert set(shares) == {"kernels: gemm", "kernels: copy"} and 0.3 < shares["kernels: gemm"] < 0.7
    high = band["high_ns"] / p.iteration_ns
    assert 1.05 < high < math.exp(HIGH) - 0.05
    assert band["low_ns"] == pytest.approx(p.iteration_ns, rel=1e-6)


@pytest.mark.slow
def test_collectives_take_the_held_out_nccl_residuals(tmp_path, warehouse):
    from maya.estimators.collective_residuals import shipped_residuals

    p, band = band_of(trace(tmp_path / "dp", gemms=1, size=512, ranks=2, allreduce=1 << 28), warehouse)
    assert p.exposed_comm_ns > 0.5 * p.iteration_ns
    assert band["shares"]["collectives: intra-node"] > 0.5
    q10, q50, q90 = shipped_residuals().quantiles["intra-node"][">=16MB"]
    assert band["low_ns"] < p.iteration_ns * math.exp(q50) < band["high_ns"]
    assert (
        math.exp(q10) * 0.999
        < band["low_ns"] / p.iteration_ns
        < band["high_ns"] / p.iteration_ns
        < math.exp(q90) * 1.003
    )


def test_no_band_without_residuals(tmp_path, warehouse):
    p = predict(trace(tmp_path / "r"), durations="roofline", warehouse=warehouse, band=True)
    assert p.band is None and any("no 10-90% band" in n for n in p.notes)


def test_composed_calls_draw_their_errors_with_the_family_they_are_composed_from():
    """Fused attention's products are GEMMs priced by the GEMM model: one draw moves both (not an independent
    `attention` group that would average the same model's error away)."""
    from maya.simulator.band import _error_family

    family = np.array(["attention", "attention", "gemm", "copy"], dtype=object)
    method = np.array(["composed", "roofline", "model", "roofline"], dtype=object)
    assert _error_family(family, method).tolist() == ["gemm", "attention", "gemm", "copy"]


@pytest.mark.slow
def test_model_discrepancy_widens_the_band_in_quadrature_and_leaves_the_prediction(tmp_path, warehouse, monkeypatch):
    path = trace(tmp_path / "g", gemms=1)
    p, residual = band_of(path, warehouse)
    monkeypatch.setattr("maya.simulator.band.shipped_discrepancy", lambda: Discrepancy(0.1, 0.3))
    q, widened = band_of(path, warehouse)
    assert q.iteration_ns == p.iteration_ns
    above = math.log(residual["high_ns"] / p.iteration_ns)
    assert widened["high_ns"] == pytest.approx(p.iteration_ns * math.exp(math.hypot(above, 0.3)), rel=1e-6)
    assert widened["low_ns"] == pytest.approx(p.iteration_ns * math.exp(-0.1), rel=1e-6)  # residual low: none
    assert widened["discrepancy"] == {"low": 0.1, "high": 0.3, "residual_scale": 1.0}
    assert (widened["residual_low_ns"], widened["residual_high_ns"]) == (residual["low_ns"], residual["high_ns"])


@pytest.mark.slow
def test_a_band_calibrated_without_residuals_is_the_discrepancy_and_says_so(tmp_path, warehouse, monkeypatch):
    path = trace(tmp_path / "g", gemms=1)
    p, residual = band_of(path, warehouse)
    calibrated = Discrepancy(0.1, 0.05, 0.0, {"calibrated_on": "suites a, b", "rows": 12, "written": "2026-11-29"})
    monkeypatch.setattr("maya.simulator.band.shipped_discrepancy", lambda: calibrated)
    q, band = band_of(path, warehouse)
    assert q.iteration_ns == p.iteration_ns
    assert band["high_ns"] == pytest.approx(p.iteration_ns * math.exp(0.05), rel=1e-9)  # not the residuals' +40%
    assert band["low_ns"] == pytest.approx(p.iteration_ns * math.exp(-0.1), rel=1e-9)
    assert band["residual_high_ns"] == pytest.approx(residual["high_ns"])  # kept beside it
    assert "calibrated by split conformal on suites a, b (12 rows, 2026-11-29)" in band["meaning"]
    assert any(n.startswith("10-90% band: model discrepancy") for n in q.notes)


def test_proxied_shares_are_the_proxy_priced_kernels_share_of_the_iteration():
    """llm-foundry's Triton attention (`lftriton_*`, priced from FlashAttention v1) carries its stated +-20%
    over the share of the iteration it takes; other kernels carry none."""
    from types import SimpleNamespace

    import pandas as pd

    from maya.simulator.band import _proxied_shares

    ops = ["lftriton_fwd_causal", "lftriton_bwd_causal", "flash_fwd", "gemm", "nccl"]
    program = SimpleNamespace(frame=pd.DataFrame({"op": ops}))
    device = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    compute = np.array([True, True, True, True, False])
    prediction = SimpleNamespace(compute_ns=80.0, iteration_ns=100.0)
    assert _proxied_shares(program, device, compute, prediction) == pytest.approx({0.2: 0.8 * 30 / 100})
    assert _proxied_shares(SimpleNamespace(frame=None), device, compute, prediction) == {}
