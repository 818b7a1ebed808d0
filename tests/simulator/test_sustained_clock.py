"""The power-capped sustained clock (`maya.simulator.sustained_clock`), judged by its outcomes: a long step of
bf16 GEMMs priced at the H100 SXM's burst rate runs at its measured sustained rate, a lower cap is slower, the
A100 and short bursts are unchanged, memory-bound kernels keep their time, and the switch turns it off."""

import numpy as np
import pytest

from maya.api import PredictOptions, predict
from maya.core import hardware
from maya.simulator import DurationProvider, simulate
from maya.simulator.opcodes import COLL
from maya.simulator.sustained_clock import sustained_clock
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

H100 = hardware.get("h100-sxm")
A100 = hardware.get("a100-sxm-80gb")
BURST_TFLOPS = {"h100-sxm": 794.5, "a100-sxm-80gb": 271.2}
"""Short-loop bf16 GEMM rates (MAMF finder, `kernels_public/sustained_gemm`)."""
SUSTAINED_H100_TFLOPS = 730.0
"""gpu-fryer 1.1.0's back-to-back 8192^3 bf16 GEMMs at the 700 W cap."""
SIDE = 8192
GEMM_FLOPS = 2 * SIDE**3
ELEMENTWISE_NS = 50_000


class Burst(DurationProvider):
    """GEMMs at the part's short-loop rate (a 700 W-class H100's on other Hopper parts), other kernels 50 us: as
    kernel models trained on short-loop timings price them."""

    name = "burst"
    prices_burst_kernels = True

    def device_ns(self, calls, hw):
        rate = BURST_TFLOPS.get(hw.name, BURST_TFLOPS["h100-sxm"]) * 1e12
        flops = calls["flops"].to_numpy(dtype="float64", na_value=np.nan)
        gemm = (calls["family"] == "gemm").to_numpy()
        out = np.where(gemm, flops / rate * 1e9, ELEMENTWISE_NS)
        return np.where(calls["opcode"].to_numpy() == COLL, 0.0, out)


def run(tmp_path, gemms_per_step: int, steps: int = 3):
    """One rank: `steps` iterations of `gemms_per_step` bf16 8192^3 GEMMs each followed by an elementwise kernel."""
    b = TraceBuilder(1)
    k = b.rank(0)
    for step in range(steps):
        k.iteration = step
        for _ in range(gemms_per_step):
            k.gemm(SIDE, SIDE, SIDE, 0)
            k.kernel(ELEMENTWISE_NS)
        k.device_sync()
    return b.write(tmp_path / f"run{gemms_per_step}")


def gemm_tflops(sim) -> float:
    """The GEMMs' rate in the replayed program (TFLOP/s)."""
    frame = sim.programs[0].frame
    gemm = (frame["family"] == "gemm").to_numpy()
    return GEMM_FLOPS * gemm.sum() / (sim.devices[0][gemm].sum() * 1e-9) / 1e12


def test_a_long_h100_step_runs_at_the_measured_sustained_rate(tmp_path):
    traces = load(run(tmp_path, 200))  # 0.28 s of GEMMs a step
    on, off = simulate(traces, H100, Burst()), simulate(traces, H100, Burst(), sustained_clock=False)
    assert gemm_tflops(off) == pytest.approx(794.5, rel=1e-3)
    assert gemm_tflops(on) == pytest.approx(SUSTAINED_H100_TFLOPS, rel=0.03)
    note = next(n for n in on.notes if n.startswith("sustained clock"))
    assert "700 W" in note and "--no-sustained-clock" in note
    assert not any(n.startswith("sustained clock") for n in off.notes)
    elementwise = (on.programs[0].frame["family"] != "gemm").to_numpy()
    assert np.array_equal(on.devices[0][elementwise], off.devices[0][elementwise])  # memory-bound: unchanged
    assert on.result(0).end.max() > off.result(0).end.max()


def test_a_500_w_h100_part_file_is_slower_than_the_700_w_one(tmp_path):
    traces = load(run(tmp_path, 200))
    part = tmp_path / "part.yaml"
    part.write_text(
        "name: h100-96gb-hbm2e\nbased_on: h100-sxm\nmemory_gb: 96\nmemory_bandwidth_gbs: 2400\ntdp_w: 500\n"
    )
    capped = hardware.get(str(part))
    at_700, at_500 = gemm_tflops(simulate(traces, H100, Burst())), gemm_tflops(simulate(traces, capped, Burst()))
    assert at_500 < 0.93 * at_700
    assert at_500 > 0.5 * at_700


def test_the_a100_keeps_its_kernel_times(tmp_path):
    traces = load(run(tmp_path, 100))  # 0.41 s of GEMMs a step on the A100
    on, off = simulate(traces, A100, Burst()), simulate(traces, A100, Burst(), sustained_clock=False)
    assert np.array_equal(on.devices[0], off.devices[0])
    assert not any(n.startswith("sustained clock") for n in on.notes)
    assert sustained_clock(A100, 312.0) is None
    assert sustained_clock(hardware.get("v100-sxm-32gb"), 100.0) is None


def test_a_short_burst_keeps_the_burst_clock(tmp_path):
    traces = load(run(tmp_path, 10))  # 14 ms of GEMMs a step: a burst, as the short-loop measurements are
    on, off = simulate(traces, H100, Burst()), simulate(traces, H100, Burst(), sustained_clock=False)
    assert np.array_equal(on.devices[0], off.devices[0])


def test_a_provider_of_sustained_timings_is_not_slowed_again(tmp_path):
    class Sustained(Burst):
        prices_burst_kernels = False

    traces = load(run(tmp_path, 200))
    assert gemm_tflops(simulate(traces, H100, Sustained())) == pytest.approx(794.5, rel=1e-3)


def test_slower_gemms_draw_less_power_and_slow_less():
    fast, slow = sustained_clock(H100, 794.5), sustained_clock(H100, 500.0)
    assert fast.ratio < slow.ratio <= 1.0
    with pytest.raises(ValueError, match="burst rate"):
        sustained_clock(H100, 0.0)


@pytest.mark.slow
def test_predict_options_switch_reaches_the_prediction_and_its_json(tmp_path):
    path = run(tmp_path, 200)
    on = predict(path, PredictOptions(durations=Burst()))
    off = predict(path, PredictOptions(durations=Burst(), sustained_clock=False))
    assert on.iteration_ns > 1.05 * off.iteration_ns
    assert any(n.startswith("sustained clock") for n in on.to_dict()["notes"])
    assert not any(n.startswith("sustained clock") for n in off.to_dict()["notes"])
