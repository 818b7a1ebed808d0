"""Ground truth of one script on the CPU (`workload_measure`): tiny configs of the reference
workloads, iteration statistics on a fake clock, out-of-memory and other failures as results,
iterations marked without an optimizer, and the `--measure` command."""

import json
import textwrap
from itertools import accumulate
from pathlib import Path

import pytest
import torch
from paths import SHIPPED_WORKLOADS
from torch.optim.optimizer import _global_optimizer_post_hooks
from typer.testing import CliRunner

from maya.cli import app
from maya.profiler.workloads.measure import MeasureSettings, measure_workload, oom_requested_bytes
from maya.profiler.workloads.results import read_result, read_results
from maya.profiler.workloads.timing import IterationStats, IterationTimer, WallClock
from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKLOADS = SHIPPED_WORKLOADS
TINY_GPT = [
    str(WORKLOADS / "gpt.py"),
    "--layers",
    "1",
    "--dim",
    "32",
    "--heads",
    "2",
    "--vocab",
    "64",
    "--seq",
    "8",
    "--batch",
    "2",
    "--steps",
    "100",
]
TINY_LLAMA = [
    str(WORKLOADS / "llama.py"),
    "--layers",
    "1",
    "--dim",
    "32",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--ffn",
    "64",
    "--vocab",
    "64",
    "--seq",
    "8",
    "--batch",
    "2",
    "--steps",
    "100",
    "--bf16",
]
QUICK = MeasureSettings(warmup=2, iterations=10)


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


SGD_STEPS = """
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range({steps}):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("argv", [TINY_GPT, TINY_LLAMA], ids=["gpt", "llama"])
def test_reference_workload_measured_on_cpu(tmp_path, argv):
    hooks_before = len(_global_optimizer_post_hooks)
    row = measure_workload(argv, tmp_path, "tiny", QUICK, hardware="cpu-test", attrs={"expect": "ok"})
    assert row["status"] == "ok" and row["error"] is None and not row["oom"]
    assert row["timing_source"] == "wall_clock" and row["iterations_by"] == "optimizer"
    assert row["measured_iterations"] == 10 and len(row["iteration_ns"]) == len(row["host_iteration_ns"]) == 10
    assert row["p10_ns"] <= row["median_ns"] <= row["p90_ns"]
    assert row["max_memory_allocated_bytes"] is None  # no CUDA allocator on the CPU
    assert row["workload"] == Path(argv[0]).stem and row["hardware"] == "cpu-test"
    config = json.loads(row["config"])
    assert config == {
        "script": argv[0],
        "args": argv[1:],
        "warmup": 2,
        "iterations": 10,
        "iterations_by": "optimizer",
        "expect": "ok",
    }
    assert read_result(tmp_path, "tiny") == row
    # the trace holds the two profiled iterations, after 2 warm-up, 10 measured and 1 profiler warm-up
    trace = tmp_path / row["trace_path"]
    assert row["trace_iterations"] == [13, 14] and validate_run(trace) == []
    ops = Run(trace).table("ops").to_pylist()
    assert {o["iteration"] for o in ops if o["name"].startswith("aten::")} == {13, 14}
    assert {o["phase"] for o in ops if o["iteration"] == 14} >= {"forward", "backward", "optimizer"}
    assert len(_global_optimizer_post_hooks) == hooks_before


def test_iteration_stats_on_a_fake_clock(tmp_path):
    """Iteration i lasts from the end of iteration i-1 to its own end; only the measured ones count."""
    measured_ms = [30, 10, 100, 50, 20, 90, 40, 80, 60, 70]
    durations = [5, 7] + measured_ms + [1, 1, 1]  # warm-up 0 and 1 (0 has no start), measured, profiled
    ends = iter(accumulate(int(ms * 1e6) for ms in durations))
    row = measure_workload(
        [script(tmp_path, SGD_STEPS.format(steps=100))], tmp_path, "fake", QUICK, clock=WallClock(lambda: next(ends))
    )
    assert row["iteration_ns"] == [int(ms * 1e6) for ms in durations[2:12]]
    # sorted 10..100 ms: median 55; p10 at rank 0.9 -> 19; p90 at rank 8.1 -> 91; mean 55
    assert (row["median_ns"], row["p10_ns"], row["p90_ns"], row["mean_ns"]) == (55e6, 19e6, 91e6, 55e6)
    assert IterationStats.of([3, 1, 2]) == IterationStats(median_ns=2, p10_ns=1, p90_ns=3, mean_ns=2)


def test_timer_shares_one_path_for_both_clocks():
    now = iter([0, 10, 30, 60])
    timer = IterationTimer(WallClock(lambda: next(now)), host=WallClock(iter([0, 1, 2, 3]).__next__))
    for _ in range(4):
        timer.mark()
    assert timer.count == 4 and timer.durations(1, 4) == ([10, 20, 30], [1, 1, 1])
    assert timer.durations(2, 99) == ([20, 30], [1, 1])
    with pytest.raises(ValueError, match="no start"):
        timer.durations(0, 4)


def test_out_of_memory_is_a_result_not_a_crash(tmp_path):
    argv = script(
        tmp_path,
        SGD_STEPS.format(steps=3)
        + """
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total "
                                 "capacity of 79.11 GiB of which 1.02 GiB is free.")
    """,
    )
    row = measure_workload([argv], tmp_path, "oom", QUICK)
    assert row["status"] == "oom" and row["oom"] and row["oom_requested_bytes"] == int(2.5 * 2**30)
    assert "Tried to allocate 2.50 GiB" in row["error"]
    assert row["measured_iterations"] == 1 and row["median_ns"] is None and row["trace_path"] is None
    assert not (tmp_path / "traces" / "oom").exists()
    assert read_results(tmp_path).column("status").to_pylist() == ["oom"]
    assert oom_requested_bytes("Tried to allocate 20.00 MiB") == 20 * 2**20
    assert oom_requested_bytes("out of memory") is None


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    raise ValueError('bad batch')", "ValueError: bad batch"),
        ("    raise SystemExit(3)", "SystemExit: 3"),
    ],
)
def test_script_exceptions_are_results(tmp_path, body, expected):
    row = measure_workload([script(tmp_path, SGD_STEPS.format(steps=4) + body)], tmp_path, "broken", QUICK)
    assert row["status"] == "error" and expected in row["error"] and row["median_ns"] is None


def test_script_too_short_says_how_many_iterations_it_needs(tmp_path):
    row = measure_workload([script(tmp_path, SGD_STEPS.format(steps=5))], tmp_path, "short", QUICK)
    assert row["status"] == "error" and row["measured_iterations"] == 3
    assert "ended after 5 iterations" in row["error"] and "15 are needed" in row["error"]


def test_iterations_by_marks_scripts_without_an_optimizer(tmp_path):
    argv = [
        script(
            tmp_path,
            """
        w = torch.randn(4, 4, requires_grad=True)
        for step in range(100):
            (torch.randn(2, 4) @ w).square().sum().backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                w.grad = None
    """,
        )
    ]
    row = measure_workload(argv, tmp_path, "plain", QUICK)
    assert row["status"] == "error" and "ended after 0 iterations" in row["error"]
    assert "--iterations-by" in row["error"]
    backward = torch.Tensor.backward
    row = measure_workload(argv, tmp_path / "by", "plain", MeasureSettings(2, 10, "torch.Tensor.backward"))
    assert row["status"] == "ok" and row["iterations_by"] == "torch.Tensor.backward"
    assert json.loads(row["config"])["iterations_by"] == "torch.Tensor.backward"
    assert torch.Tensor.backward is backward  # unwrapped again
    with pytest.raises(ValueError, match="dotted path"):
        measure_workload(argv, tmp_path / "bad", "plain", MeasureSettings(2, 10, "torch.no_such_function"))


def test_measured_config_is_not_measured_twice(tmp_path):
    argv = [script(tmp_path, SGD_STEPS.format(steps=100))]
    measure_workload(argv, tmp_path, "once", QUICK)
    with pytest.raises(FileExistsError, match="already measured"):
        measure_workload(argv, tmp_path, "once", QUICK)
    with pytest.raises(ValueError, match="warm-up"):
        MeasureSettings(warmup=0)


def test_measure_command(tmp_path):
    runner = CliRunner()
    out = tmp_path / "gt"
    r = runner.invoke(
        app,
        [
            "profile",
            "workload",
            "--out",
            str(out),
            "--measure",
            "--name",
            "tiny-gpt",
            "--warmup",
            "1",
            "--iterations",
            "3",
            "--",
            "python",
            *TINY_GPT,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "tiny-gpt: ok, median" in r.output and "over 3 iterations (wall_clock)" in r.output
    assert read_result(out, "tiny-gpt")["trace_iterations"] == [5, 6]
    r = runner.invoke(app, ["profile", "workload", "--out", str(out), "--suite", "s.py", "--", "python", *TINY_GPT])
    assert r.exit_code == 2 and "--suite takes no script" in r.stderr
    r = runner.invoke(app, ["profile", "workload", "--out", str(out), "--measure", "--warmup", "0", "--", *TINY_GPT])
    assert r.exit_code == 2 and "warm-up" in r.stderr
