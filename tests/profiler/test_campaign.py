"""Campaigns: the time budget (fake clock), resuming, stopping on a CUDA error, and one small campaign
measured end to end on CPU tensors (the loop and the files, not GPU numbers)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.profiler.kernels import sweep
from maya.profiler.kernels.campaign import CampaignSettings, run_campaign
from maya.profiler.kernels.campaign_store import read_measurements
from maya.profiler.kernels.configs import KernelConfig
from maya.profiler.kernels.measure import CampaignAbort
from maya.profiler.kernels.results import Samples, Timing
from maya.profiler.kernels.timing import TimingSettings
from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeMeasurer:
    """Takes `config_s` of fake time per config and `profile_s` per profiled config; measures nothing."""

    def __init__(self, clock: FakeClock, config_s: float = 1.0, profile_s: float = 0.25, abort_at: int | None = None):
        self.clock, self.config_s, self.profile_s, self.abort_at = clock, config_s, profile_s, abort_at
        self.timed: list[KernelConfig] = []

    def time_config(self, config: KernelConfig) -> Timing:
        self.clock.now += self.config_s
        self.timed.append(config)
        if len(self.timed) == self.abort_at:
            raise CampaignAbort(Timing(config, "error", 0, 1, error="CUDA error: an illegal memory access"))
        return Timing(config, "ok", 1 << 20, 2, Samples([900, 1000, 1100], [20, 30, 40], gpu_bound=True))

    def profile(self, timings, trace_path: Path) -> None:
        self.clock.now += self.profile_s * len(timings)


SMALL = ("memcpy", "memset")


def campaign(tmp_path, clock, measurer, budget_s, **kw):
    settings = CampaignSettings(families=SMALL, budget_s=budget_s, chunk_s=10.0, **kw)
    return run_campaign(tmp_path / "c", settings, device="cpu", measurer=measurer, clock=clock, log=lambda _: None)


@pytest.mark.slow
def test_stops_before_the_budget_and_resumes_where_it_stopped(tmp_path):
    order = [c.key for c in sweep.build_sweep(SMALL)]
    clock = FakeClock()
    first = FakeMeasurer(clock)
    start = clock.now
    result = campaign(tmp_path, clock, first, budget_s=40)
    assert result.stop_reason == "budget"
    assert clock.now - start <= 40
    assert 20 <= len(first.timed) < len(order)
    assert [c.key for c in first.timed] == order[: len(first.timed)]  # priority order
    done = read_measurements(tmp_path / "c").column("config_key").to_pylist()
    assert sorted(done) == sorted(order[: len(first.timed)])

    second = FakeMeasurer(clock)
    result = campaign(tmp_path, clock, second, budget_s=600)
    assert result.stop_reason == "complete" and result.done == result.total == len(order)
    assert [c.key for c in second.timed] == order[len(first.timed) :]  # done configs are skipped
    assert sorted(read_measurements(tmp_path / "c").column("config_key").to_pylist()) == sorted(order)
    sessions = json.loads(Run(tmp_path / "c" / "trace").info["attrs"])["sessions"]
    assert [s["stop_reason"] for s in sessions] == ["budget", "complete"]

    third = FakeMeasurer(clock)
    assert campaign(tmp_path, clock, third, budget_s=600).stop_reason == "complete" and third.timed == []


def test_a_too_small_budget_measures_nothing(tmp_path):
    clock = FakeClock()
    measurer = FakeMeasurer(clock)
    result = campaign(tmp_path, clock, measurer, budget_s=4)
    assert (result.stop_reason, measurer.timed, result.done) == ("budget", [], 0)


def test_slow_configs_write_chunks_and_still_stop_in_time(tmp_path):
    clock = FakeClock()
    measurer = FakeMeasurer(clock, config_s=7.0, profile_s=3.0)
    start = clock.now
    result = campaign(tmp_path, clock, measurer, budget_s=120)
    assert result.stop_reason == "budget" and clock.now - start <= 120
    parts = list((tmp_path / "c" / "measurements").iterdir())
    assert len(parts) >= 2  # one part per chunk of about chunk_s of work


def test_cuda_error_stops_the_session_and_is_not_retried(tmp_path):
    clock = FakeClock()
    result = campaign(tmp_path, clock, FakeMeasurer(clock, abort_at=3), budget_s=600)
    assert result.stop_reason == "cuda-error"
    rows = read_measurements(tmp_path / "c").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "ok", "error"]
    assert "illegal memory access" in rows[-1]["error"]
    again = FakeMeasurer(clock)
    campaign(tmp_path, clock, again, budget_s=600)
    assert rows[-1]["config_key"] not in {c.key for c in again.timed}


@pytest.mark.e2e
@pytest.mark.slow
def test_small_campaign_end_to_end_on_cpu(tmp_path):
    configs = [
        KernelConfig.make("linear", "fp32", m=64, n=128, k=32),
        KernelConfig.make("layer_norm_bwd", "bf16", tokens=16, hidden=64),
        KernelConfig.make(
            "sdpa_bwd", "fp32", batch=1, seq=32, heads=2, kv_heads=2, head_dim=16, causal=1, backend="flash"
        ),
        KernelConfig.make("memcpy_h2d", "u8", bytes=4096, pinned=1),
    ]
    settings = CampaignSettings(
        families=("gemm",),
        budget_s=120,
        hardware="cpu-test",
        timing=TimingSettings(warmup=1, min_repeats=3, max_repeats=4, target_s=1e-3, profiled_repeats=2),
    )
    lines = []
    result = run_campaign(tmp_path / "c", settings, device="cpu", sweep=configs, log=lines.append)
    assert result.stop_reason == "complete" and result.done == 4
    assert any("wrote 4 configs" in line for line in lines)
    assert result.summary_lines()[-1].startswith("stopped: complete")
    rows = {r["op"]: r for r in read_measurements(tmp_path / "c").to_pylist()}
    assert rows["memcpy_h2d"]["status"] == "unsupported"
    for op in ("linear", "layer_norm_bwd", "sdpa_bwd"):
        r = rows[op]
        assert r["status"] == "ok" and r["hardware"] == "cpu-test"
        assert 0 < r["p10_ns"] <= r["median_ns"] <= r["p90_ns"] and r["n_repeats"] >= 3
        assert r["kernel_ns"] is None  # no device work on a CPU
    trace = tmp_path / "c" / "trace"
    assert validate_run(trace) == []
    ops = Run(trace).table("ops").to_pylist()
    configs_seen = {o["name"] for o in ops if o["name"].startswith("maya.config:")}
    assert configs_seen == {f"maya.config:{c.key}" for c in configs[:3]}
    linear = [o for o in ops if o["name"] == "aten::linear"]
    assert len(linear) == 2 and linear[0]["input_shapes"][:2] == [[64, 32], [128, 32]]
    assert not any(p.name.startswith(".") for p in (tmp_path / "c").iterdir())  # no temporary leftovers


def test_cli_needs_a_gpu_and_known_families(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["profile", "kernels", "--out", str(tmp_path / "c"), "--families", "gemm,nope"])
    assert r.exit_code == 2 and "unknown family nope" in r.stderr
    r = runner.invoke(app, ["profile", "kernels", "--out", str(tmp_path / "c"), "--budget-min", "1"])
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert r.exit_code == 1 and "no CUDA device" in r.stderr
    assert not (tmp_path / "c").exists()
