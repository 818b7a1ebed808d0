"""`maya profile workload` and `maya demo`: an unmodified script measured with torch.profiler (CPU here)."""

import json

import duckdb
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.core.paths import example_script
from maya_trace_spec import Run
from maya_trace_spec.duck import register_run
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()


def test_profile_workload_marks_iterations_and_phases(tmp_path):
    out = tmp_path / "run"
    args = ["--steps", "3", "--layers", "1", "--dim", "64", "--vocab", "512", "--seq", "32"]
    r = runner.invoke(app, ["profile", "workload", "--out", str(out), "--", "python", str(example_script()), *args])
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    run = Run(out)
    assert json.loads(run.info["command"]) == ["python", str(example_script()), *args]
    assert run.info["framework"].startswith("torch ")
    con = duckdb.connect()
    register_run(con, out)
    phases = con.execute("""SELECT iteration, list(DISTINCT phase ORDER BY phase) FROM ops
                            WHERE iteration < 3 AND name LIKE 'aten::%' GROUP BY 1 ORDER BY 1""").fetchall()
    # one iteration per optimizer step, each with its forward, backward and optimizer ops
    assert phases == [(i, ["backward", "forward", "optimizer"]) for i in range(3)]
    # the fc1 Linear of the example (dim 64 -> 256) shows up with its real shapes
    shapes = con.execute("SELECT DISTINCT input_shapes FROM ops WHERE name = 'aten::linear'").fetchall()
    assert ([[4, 31, 64], [256, 64], [256]],) in shapes


def test_profile_workload_refuses_non_empty_out(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    r = runner.invoke(app, ["profile", "workload", "--out", str(tmp_path), "--", "python", str(example_script())])
    assert r.exit_code == 1 and "not empty" in r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_profile_workload_missing_script(tmp_path):
    r = runner.invoke(app, ["profile", "workload", "--out", str(tmp_path / "x"), "--", "python", "nope.py"])
    assert r.exit_code == 2 and "nope.py: no such script" in r.stderr


def test_demo_runs_end_to_end(tmp_path, maya_home):
    """The main job: emulate the example, train a (small) estimator version, predict, store."""
    out = tmp_path / "demo"
    r = runner.invoke(app, ["demo", "--out", str(out), "--training-sample", "3000"])
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    assert Run(out).info["source"] == "emulator"
    assert (tmp_path / "demo.timeline.json").stat().st_size > 0
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    assert con.execute("SELECT source, path FROM runs").fetchall() == [("emulator", str(out.resolve()))]
    ((durations, iteration_ms),) = con.execute("SELECT durations, iteration_ms FROM predictions").fetchall()
    assert durations.startswith("estimators") and iteration_ms > 0
    assert "bounded, not fitted" in " ".join(r.output.split())  # the small GPT's kernels are that short
    con.close()
    # run again, as a user does: the registered version is used, not trained again
    again = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo2"), "--training-sample", "3000"])
    assert again.exit_code == 0, again.output
    assert "using registered version" in again.output
    with duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM estimator_versions").fetchone() == (1,)
