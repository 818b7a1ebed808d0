"""Suites of workload configs (`workload_suite`): loading suite files, skipping configs already done,
stopping within the time budget (fake clock and fake config runs), rows for configs whose process
died or hung, and one real suite run through run_on_device.py, each config in a fresh process."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import PROFILER_RUNNER, SHIPPED_WORKLOADS

from maya.profiler.workloads.measure import MeasureSettings
from maya.profiler.workloads.results import config_columns, read_result, read_results, write_result
from maya.profiler.workloads.suite import ChildRun, SuiteConfig, SuiteSettings, load_suite, run_suite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUNNER = PROFILER_RUNNER


def write_suite(tmp_path: Path, entries: list[dict], suffix: str = ".json") -> Path:
    for entry in entries:
        (tmp_path / entry["script"]).touch()
    path = tmp_path / f"suite{suffix}"
    path.write_text(json.dumps(entries) if suffix == ".json" else f"CONFIGS = {entries!r}\n")
    return path


class FakeDevice:
    """A fake clock and a fake config runner: config `name` takes `seconds[name]` (default 30) and
    writes an ok row, unless it outlasts its limit (killed) or is listed in `crash`."""

    def __init__(self, seconds: dict[str, float] | None = None, crash: tuple[str, ...] = ()):
        self.now = 0.0
        self.seconds = seconds or {}
        self.crash = crash
        self.ran: list[tuple[str, float]] = []

    def clock(self) -> float:
        return self.now

    def runner(self, root: Path):
        def run(config: SuiteConfig, limit_s: float) -> ChildRun:
            self.ran.append((config.name, limit_s))
            needed = self.seconds.get(config.name, 30.0)
            self.now += min(needed, limit_s)
            if needed > limit_s:
                return ChildRun(None, "step 3: loss 9.1")
            if config.name in self.crash:
                return ChildRun(-11, "Segmentation fault")
            write_result(root, {**config_columns(config.name, config.argv, {}), "status": "ok", "oom": False})
            return ChildRun(0, "")

        return run


def entries(n: int, **extra) -> list[dict]:
    return [{"name": f"c{i}", "script": "train.py", "args": ["--i", str(i)], **extra} for i in range(n)]


def test_suite_resumes_where_the_budget_stopped_it(tmp_path):
    suite = write_suite(tmp_path, entries(5, estimate_s=30))
    root, device = tmp_path / "gt", FakeDevice()
    settings = SuiteSettings(budget_s=100, margin_s=5)
    first = run_suite(root, suite, settings, run_config=device.runner(root), clock=device.clock, log=lambda _: None)
    # at 90 s only 5 s are left before the margin: c3's 30 s no longer fit
    assert [n for n, _ in device.ran] == ["c0", "c1", "c2"]
    assert (first.stop_reason, first.done, first.total, first.measured["ok"]) == ("budget", 3, 5, 3)
    device.ran.clear()
    lines = []
    second = run_suite(root, suite, settings, run_config=device.runner(root), clock=device.clock, log=lines.append)
    assert [n for n, _ in device.ran] == ["c3", "c4"]  # done configs are skipped
    assert (second.stop_reason, second.done) == ("complete", 5)
    assert lines[0] == "5 configs in the suite, 3 already done, budget 100 s"
    assert second.summary_lines()[-1] == "stopped: complete after 60 s; 5/5 configs of the suite done"
    assert read_results(root).column("name").to_pylist() == ["c0", "c1", "c2", "c3", "c4"]


def test_config_killed_by_the_budget_is_measured_again_next_time(tmp_path):
    suite = write_suite(tmp_path, entries(2, estimate_s=10))
    root, device = tmp_path / "gt", FakeDevice({"c1": 80})
    settings = SuiteSettings(budget_s=100, margin_s=5, config_timeout_s=120)
    result = run_suite(root, suite, settings, run_config=device.runner(root), clock=device.clock, log=lambda _: None)
    assert device.ran == [("c0", 95), ("c1", 65)]  # c1's limit is what is left of the budget
    assert result.stop_reason == "budget" and result.done == 1
    assert not (root / "results" / "c1.parquet").exists()


def test_hung_and_crashed_configs_are_recorded(tmp_path):
    suite = write_suite(tmp_path, entries(3))
    root, device = tmp_path / "gt", FakeDevice({"c0": 500}, crash=("c1",))
    settings = SuiteSettings(budget_s=1000, config_timeout_s=60, measure=MeasureSettings(2, 10))
    result = run_suite(root, suite, settings, run_config=device.runner(root), clock=device.clock, log=lambda _: None)
    assert result.stop_reason == "complete" and dict(result.measured) == {"timeout": 1, "error": 1, "ok": 1}
    hung, crashed = read_result(root, "c0"), read_result(root, "c1")
    assert hung["status"] == "timeout" and hung["error"].endswith("\nkilled after 60 s")
    assert "step 3: loss 9.1" in hung["error"] and hung["wall_s"] == 60
    assert crashed["status"] == "error" and crashed["error"].endswith("exited with code -11 without a results row")
    assert "Segmentation fault" in crashed["error"]
    assert json.loads(crashed["config"]) == {
        "script": str(tmp_path / "train.py"),
        "args": ["--i", "1"],
        "warmup": 2,
        "iterations": 10,
        "iterations_by": "optimizer",
        "suite": str(suite),
    }


@pytest.mark.parametrize("suffix", [".json", ".py"])
def test_suite_files(tmp_path, suffix):
    suite = write_suite(
        tmp_path,
        [
            {"name": "a", "script": "a.py", "args": ["--n", 3], "estimate_s": 7, "expect": "oom"},
            {"name": "b", "script": "b.py", "iterations_by": "torch.Tensor.backward"},
        ],
        suffix,
    )
    a, b = load_suite(suite)
    assert (a.name, a.argv, a.estimate_s, a.iterations_by) == ("a", [str(tmp_path / "a.py"), "--n", "3"], 7, None)
    assert a.recorded_attrs == {"estimate_s": 7, "expect": "oom", "suite": str(suite)}
    assert (b.args, b.estimate_s, b.measure_settings(MeasureSettings()).iterations_by) == (
        (),
        None,
        "torch.Tensor.backward",
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        ([{"name": "a", "script": "t.py"}, {"name": "a", "script": "t.py"}], "appears twice"),
        ([{"name": "a b", "script": "t.py"}], "letters, digits"),
        ([{"name": "a", "script": "missing.py"}], "no script"),
        ({"name": "a"}, "is a list of configs"),
    ],
)
def test_bad_suite_files(tmp_path, bad, message):
    (tmp_path / "t.py").touch()
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=message):
        load_suite(path)


def test_suite_runs_each_config_in_a_fresh_process_from_the_source_checkout(tmp_path):
    """run_on_device.py workload --suite: a tiny GPT, an out-of-memory script, a crash; run again, nothing to do."""
    workloads = SHIPPED_WORKLOADS
    (tmp_path / "oom.py").write_text(
        textwrap.dedent("""
        import torch
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
    """)
    )
    (tmp_path / "crash.py").write_text("import os\nos._exit(7)\n")
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            [
                {
                    "name": "gpt-tiny",
                    "script": str(workloads / "gpt.py"),
                    "estimate_s": 5,
                    "args": [
                        "--layers",
                        "1",
                        "--dim",
                        "16",
                        "--heads",
                        "2",
                        "--vocab",
                        "32",
                        "--seq",
                        "8",
                        "--batch",
                        "1",
                    ],
                },
                {"name": "oom", "script": "oom.py", "expect": "oom"},
                {"name": "crash", "script": "crash.py"},
            ]
        )
    )
    command = [
        sys.executable,
        str(RUNNER),
        "workload",
        "--out",
        "gt",
        "--suite",
        str(suite),
        "--warmup",
        "1",
        "--iterations",
        "2",
        "--hardware",
        "cpu-test",
    ]
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "gpt-tiny: ok, median" in out.stdout and "oom: oom, out of memory asking for 1.00 GiB" in out.stdout
    assert "stopped: complete" in out.stdout and "3/3 configs of the suite done" in out.stdout
    rows = {r["name"]: r for r in read_results(tmp_path / "gt").to_pylist()}
    assert {n: r["status"] for n, r in rows.items()} == {"gpt-tiny": "ok", "oom": "oom", "crash": "error"}
    assert rows["gpt-tiny"]["hardware"] == "cpu-test" and rows["gpt-tiny"]["trace_iterations"] == [4, 5]
    assert (tmp_path / "gt" / rows["gpt-tiny"]["trace_path"] / "run.parquet").exists()
    assert "GPT: " in (tmp_path / "gt" / "logs" / "gpt-tiny.log").read_text()
    assert "exited with code 7" in rows["crash"]["error"]
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "3 already done" in again.stdout and "this session: none" in again.stdout
