"""`maya.api`: the options objects, `capture` through the atomic capture cache (with the launcher replaced by a
stand-in that writes synthetic runs: no emulation), `predict` without side effects, `record`, and the notebook
API (`open_run`, `Prediction.to_frame`) on synthetic runs."""

import json
import os

import pytest
from typer.testing import CliRunner

import maya
from maya import api
from maya.cli import app
from maya.core.sql import QueryRefused
from maya.emulator import capture_cache, launcher
from maya.emulator.capture_cache import CaptureCache, failure_summary
from maya.emulator.launcher import EmulationResult, RankCapture
from maya_trace_spec import Run, RunWriter, TraceError, read_table, synthetic

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: boom\n  on two lines\n'


def one_rank_run(path, status: str = "complete"):
    """A one-rank synthetic run (it replays without deadlock) whose run row has `status`."""
    run = synthetic.write_run(path, world_size=1, calls_per_rank=60, ops_per_rank=6)
    if status != "complete":
        RunWriter(run).write("run", {k: [v] for k, v in {**Run(run).info, "status": status}.items()})
    return run


class FakeLauncher:
    """Stands in for `launcher.emulate`: records its calls and writes a run of the status it is told."""

    def __init__(self, status: str = "complete", error: str | None = None, peak: int = 3 * 2**30):
        self.calls: list[dict] = []
        self.status, self.error, self.peak = status, error, peak

    def __call__(self, argv, out_dir, **kw) -> EmulationResult:
        self.calls.append({"argv": argv, "out_dir": out_dir, **kw})
        one_rank_run(out_dir, self.status)
        rank = RankCapture(0, self.status, 1, 60, self.peak, {}, self.error, 0.1)
        return EmulationResult(out_dir, self.status, [rank])


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"nnodes": 0}, "nnodes must be a positive integer"),
        ({"iterations": -1}, "iterations must be >= 0"),
        ({"device_time": "gpu"}, "unknown device_time 'gpu'; choose from estimators, roofline, host"),
        ({"nproc_per_node": 2, "ranks": (0, 2)}, "rank(s) [2] outside the world of 2"),
        ({"env": {"A=B": "1"}}, "env: names must be non-empty strings"),
    ],
)
def test_bad_emulate_options_are_named(kw, message):
    with pytest.raises(ValueError) as e:
        api.EmulateOptions(**kw)
    assert message in str(e.value)


def test_emulate_options_are_frozen_and_normalised():
    options = api.EmulateOptions(nnodes=2, nproc_per_node=4, ranks=(5, 0, 5), env={"B": "2", "A": "1"})
    assert options.world_size == 8 and options.ranks == (0, 5) and options.env == (("A", "1"), ("B", "2"))
    assert options == api.EmulateOptions(nnodes=2, nproc_per_node=4, ranks=(0, 5), env=(("B", "2"), ("A", "1")))
    with pytest.raises(AttributeError):
        options.hardware = "a100-sxm-80gb"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"durations": "fast"}, "unknown durations 'fast'; choose from auto, estimators, roofline, measured"),
        ({"dp": 0}, "dp must be >= 1"),
        ({"price_per_gpu_hour": -1.0}, "price_per_gpu_hour must be >= 0"),
    ],
)
def test_bad_predict_options_are_named(kw, message):
    with pytest.raises(ValueError) as e:
        api.PredictOptions(**kw)
    assert message in str(e.value)


# ------------------------------------------------------------------ capture and its cache


def test_capture_maps_its_options_onto_the_launcher(tmp_path, monkeypatch):
    fake = FakeLauncher()
    monkeypatch.setattr(launcher, "emulate", fake)
    options = api.EmulateOptions(nnodes=2, nproc_per_node=4, ranks=(0,), iterations=3, env={"WIDTH": "512"})
    captured = api.capture(["train.py", "--steps", "3"], options, out_dir=tmp_path / "run")
    assert captured.ok and captured.run_dir == tmp_path / "run" and not captured.reused and captured.key is None
    (call,) = fake.calls
    assert call["argv"] == ["train.py", "--steps", "3"] and call["out_dir"] == tmp_path / "run"
    assert (call["topology"].nnodes, call["topology"].nproc_per_node) == (2, 4)
    assert call["ranks"] == (0,) and call["iterations"] == 3 and call["device_time"] is None
    assert call["env"] == {"WIDTH": "512"}


@pytest.mark.slow
def test_the_cache_captures_once_atomically_and_reuses(tmp_path, monkeypatch):
    fake = FakeLauncher()
    monkeypatch.setattr(launcher, "emulate", fake)
    cache = CaptureCache(tmp_path / "cache")
    first = api.capture(["train.py"], cache=cache)
    assert first.ok and not first.reused and first.run_dir == tmp_path / "cache" / first.key
    assert fake.calls[0]["out_dir"].name.startswith(f".{first.key}.")  # captured under a hidden name
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.key]  # renamed into place
    again = api.capture(["train.py"], cache=cache)
    assert again.ok and again.reused and again.run_dir == first.run_dir and len(fake.calls) == 1
    other = api.capture(["train.py"], api.EmulateOptions(iterations=2), cache=cache)
    assert other.key != first.key and len(fake.calls) == 2  # other options: another command


def test_a_failed_capture_is_kept_with_one_summary_and_tried_again(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "emulate", FakeLauncher("failed", TRACEBACK))
    cache = CaptureCache(tmp_path)
    failed = api.capture(["train.py"], cache=cache, key="row1")
    assert failed.status == "failed" and failed.run_dir == tmp_path / "row1.failed"
    assert failed.reason == "emulation failed: RuntimeError: boom on two lines"
    assert Run(failed.run_dir).info["status"] == "failed" and cache.lookup("row1") is None
    monkeypatch.setattr(launcher, "emulate", FakeLauncher("oom"))
    oom = api.capture(["train.py"], cache=cache, key="row1")
    assert oom.status == "oom" and oom.peak_bytes == 3 * 2**30 and not oom.reused
    assert oom.reason == f"out of memory while emulating (peak 3.0 GiB); logs in {tmp_path / 'row1.failed' / 'logs'}"


def test_a_capture_that_raises_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(argv, out_dir, **kw):
        (out_dir / "half").write_text("x")
        raise OSError("disk full")

    monkeypatch.setattr(launcher, "emulate", broken)
    with pytest.raises(OSError, match="disk full"):
        api.capture(["train.py"], cache=CaptureCache(tmp_path), key="k")
    assert list(tmp_path.iterdir()) == []


def test_a_concurrent_capture_that_landed_first_wins(tmp_path, monkeypatch):
    landed = []

    def racing(argv, out_dir, **kw):
        landed.append(Run(one_rank_run(tmp_path / "k")).info["run_id"])  # another worker's run lands meanwhile
        return FakeLauncher()(argv, out_dir, **kw)

    monkeypatch.setattr(launcher, "emulate", racing)
    captured = api.capture(["train.py"], cache=CaptureCache(tmp_path), key="k")
    assert captured.reused and captured.run_dir == tmp_path / "k" and Run(tmp_path / "k").info["run_id"] == landed[0]
    assert [p.name for p in tmp_path.iterdir()] == ["k"]  # the loser's capture is gone


def test_cache_keys_are_plain_names(tmp_path):
    with pytest.raises(ValueError, match="is not a plain name"):
        CaptureCache(tmp_path).path("../escape")


def test_the_failure_summary_falls_back_to_the_log(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank0.txt").write_text("loading\n\nno GPU found\nexiting\n")
    result = EmulationResult(tmp_path, "failed", [RankCapture(0, "failed", 1, 0, 0, {}, None, 0.1)])
    assert failure_summary(result) == "emulation failed: loading | no GPU found | exiting"
    long = EmulationResult(tmp_path, "failed", [RankCapture(0, "failed", 1, 0, 0, {}, "ValueError: " + "x" * 900, 0)])
    assert len(failure_summary(long)) == capture_cache.REASON_CHARS


def test_rank_environments_get_the_extra_variables_and_this_process_keeps_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("KEPT", "1")
    monkeypatch.delenv("WIDTH", raising=False)
    (tmp_path / "preload.txt").write_text("")  # the built stubs' preload list (none here)
    env = launcher._rank_env(
        tmp_path, tmp_path, tmp_path, tmp_path, 0, launcher.Topology(), 1234, None, extra={"WIDTH": "64"}
    )
    assert env["WIDTH"] == "64" and env["KEPT"] == "1"
    assert "WIDTH" not in os.environ


# ------------------------------------------------------------------ predict and record


@pytest.mark.slow
def test_predict_stores_nothing_and_record_returns_the_stored_id(tmp_path, maya_home):
    import duckdb

    run = one_rank_run(tmp_path / "run")
    timeline = tmp_path / "t.json"
    prediction = api.predict(run, api.PredictOptions(durations="roofline", timeline=timeline))
    assert prediction.iteration_ns > 0 and timeline.stat().st_size > 0
    assert not (maya_home / "warehouse.duckdb").exists()
    pid = record(prediction, tmp_path / "w.duckdb")
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT prediction_id, run_id FROM predictions").fetchall() == [(pid, prediction.run_id)]


def record(prediction, warehouse):
    return api.record(prediction, warehouse=warehouse)


@pytest.mark.slow
def test_maya_predict_records_what_it_predicted(tmp_path, maya_home):
    import duckdb

    run = one_rank_run(tmp_path / "run")
    r = CliRunner().invoke(app, ["predict", str(run), "--durations", "roofline", "--json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    with duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT prediction_id, iteration_ms FROM predictions").fetchall()
    assert rows == [(shown["prediction_id"], pytest.approx(shown["iteration_ms"]))]


# ------------------------------------------------------------------ the notebook API


def test_open_run_gives_the_tables_as_data_frames(tmp_path):
    path = synthetic.write_run(tmp_path / "run", world_size=2, calls_per_rank=40, ops_per_rank=8)
    run = maya.open_run(path)
    assert run.ranks == [0, 1] and run.info["source"] == "synthetic"
    for frame, table in (
        (run.calls(), "api_calls"),
        (run.kernels(), "kernels"),
        (run.ops(), "ops"),
        (run.memory(), "memory_events"),
    ):
        expected = read_table(path, table)
        assert list(frame.columns) == expected.column_names and len(frame) == expected.num_rows
    assert set(run.calls([1])["rank"]) == {1} and len(run.calls([1])) == 40


@pytest.mark.slow
def test_sql_over_a_run_is_read_only(tmp_path):
    run = maya.open_run(synthetic.write_run(tmp_path / "run", world_size=2, calls_per_rank=40, ops_per_rank=8))
    counts = run.sql("SELECT rank, count(*) AS n FROM api_calls GROUP BY rank ORDER BY rank")
    assert counts.to_dict("list") == {"rank": [0, 1], "n": [40, 40]}
    with pytest.raises(QueryRefused):
        run.sql("CREATE TABLE x AS SELECT 1")


@pytest.mark.slow
def test_a_run_predicts_with_overrides_and_to_frame_has_its_figures(tmp_path, maya_home):
    run = maya.open_run(one_rank_run(tmp_path / "run"))
    options = maya.PredictOptions(durations="roofline")
    p = run.predict(options, price_per_gpu_hour=2.0)
    assert p.price_per_gpu_hour == 2.0 and p.iteration_ns == maya.predict(run.path, options).iteration_ns
    frame = p.to_frame()
    assert list(frame.index) == [p.run_id] and frame.loc[p.run_id, "iteration_ms"] == p.iteration_ns / 1e6
    assert frame.loc[p.run_id, "compute_ms"] == p.compute_ns / 1e6 and frame.loc[p.run_id, "band_low_ms"] is None
    ranks = p.to_frame(per_rank=True)
    assert list(ranks.index) == [r.rank for r in p.ranks] and list(ranks["mfu"]) == [r.mfu for r in p.ranks]
    assert not (maya_home / "warehouse.duckdb").exists()
    with pytest.raises(TypeError, match="unknown prediction option"):
        run.predict(gpu="h100-sxm")


def test_opening_what_is_not_a_run_names_the_problem(tmp_path):
    with pytest.raises(TraceError, match="no such run directory"):
        maya.open_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="not a Maya run directory"):
        maya.open_run(tmp_path / "empty")
    (tmp_path / "file.parquet").write_text("x")
    with pytest.raises(TraceError, match="not a run directory"):
        maya.open_run(tmp_path / "file.parquet")
