"""`maya search` end to end: a tiny DDP script through emulate + predict, and the Ray executor."""

import json

import duckdb
import pytest
import typer
from paths import WORKLOADS
from typer.testing import CliRunner

import maya.api
from maya.cli.search import search_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKLOAD = WORKLOADS / "search_mlp.py"


@pytest.fixture
def cli():
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("search", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(search_cmd)
    return app


def test_search_emulates_predicts_logs_and_resumes(cli, tmp_path, maya_home, monkeypatch):
    """A search emulates and predicts every point and logs it; the same search again evaluates nothing; after an
    edit of the predictor, another search predicts the same captures again without emulating them."""
    space = tmp_path / "space.yaml"
    space.write_text("gpus: 1\nparameters:\n  batch: [16, 64]\n  width: {values: [256, 512], env: MLP_WIDTH}\n")
    out = tmp_path / "out"
    args = [
        "search",
        "--space",
        str(space),
        "--algorithm",
        "grid",
        "--durations",
        "roofline",
        "--price-per-gpu-hour",
        "2",
        "--out",
        str(out),
        "--",
        "python",
        str(WORKLOAD),
        "--batch",
        "{batch}",
    ]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "best command:" in r.output and "4 of 4 valid points evaluated" in r.output
    assert (out / "pareto.html").read_text().count("plotly") > 10
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT params, status, source, iteration_ns, peak_memory_bytes, cost_per_iteration, mfu, hfu FROM search_points"
    ).fetchall()
    con.close()
    assert len(rows) == 4 and all(r[1] == "ok" and r[2] == "evaluated" and r[3] > 0 and r[4] > 0 for r in rows)
    assert all(0 < r[6] <= r[7] for r in rows)  # model and hardware FLOPs utilisation both logged
    memory = {json.loads(r[0])["width"]: r[4] for r in rows if json.loads(r[0])["batch"] == 16}
    assert memory[512] > memory[256]  # the environment reached the script
    again = CliRunner().invoke(cli, args)  # resumed by space and command: nothing runs again
    assert again.exit_code == 0 and "0 of 4 valid points evaluated" in again.output, again.output
    captures = sorted(p.name for p in (out / "runs").iterdir())
    monkeypatch.setattr(maya.api, "predictor_digest", lambda: "an edited simulator")
    other = tmp_path / "other"  # another search folder: the captures are found through the log
    edited = CliRunner().invoke(cli, [str(other) if a == str(out) else a for a in args])
    assert edited.exit_code == 0 and "4 of 4 valid points evaluated" in edited.output, edited.output
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    sources = con.execute("SELECT source, count(*) FROM search_points GROUP BY source").fetchall()
    con.close()
    assert sorted(sources) == [("capture-cache", 4), ("evaluated", 4)]  # predicted again, not emulated
    assert sorted(p.name for p in (out / "runs").iterdir()) == captures and not (other / "runs").exists()


def test_bad_space_fails_before_anything_runs(cli, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("parameters:\n  batch: [16]\nconstraints: ['batch < tp']\n")
    r = CliRunner().invoke(
        cli, ["search", "--space", str(space), "--gpus", "1", "--", "python", str(WORKLOAD), "--batch", "{batch}"]
    )
    assert r.exit_code == 2 and "unknown name(s) ['tp']" in r.output


def test_an_unresolved_script_is_said_and_an_unreadable_warehouse_fails_clearly(cli, tmp_path):
    """A module the CLI cannot find is searched with a warning that its edits go unseen; a warehouse whose
    estimator version cannot be read stops the search before anything runs (no salt silently left empty)."""
    space = tmp_path / "space.yaml"
    space.write_text("parameters:\n  batch: [16]\n")
    broken = tmp_path / "wh.duckdb"
    broken.write_bytes(b"not a duckdb file" * 100)
    args = ["search", "--space", str(space), "--gpus", "1", "--warehouse", str(broken), "--"]
    r = CliRunner().invoke(cli, [*args, "python", "-m", "no_such_module_here", "--batch", "{batch}"])
    assert "the command cache cannot see its edits" in r.output
    assert r.exit_code == 2 and "cannot read the estimator version from the warehouse" in r.output, r.output


def test_ray_executor_runs_a_small_search():
    ray = pytest.importorskip("ray", reason="ray is not installed")
    from maya.search import Outcome, RayExecutor, load_space, run_search

    def figures(task, known):  # pickled by value into the Ray workers
        batch = int(task.argv[-1])
        return Outcome("ok", 1e6 / batch + batch, 10, 0.5, world_size=task.world_size)

    space = load_space({"parameters": {"batch": [1, 2, 4, 8, 16, 32, 64]}}, ["t.py", "{batch}"], gpus=2)
    executor = RayExecutor(None, task_cpus=1, num_cpus=2, include_dashboard=False)
    try:
        result = run_search(space, figures, algorithm="grid", executor=executor, parallel=2)
    finally:
        ray.shutdown()
    assert result.best.params == {"batch": 64} and result.evaluations == 7
    assert json.loads(json.dumps(result.best.outcome.to_dict()))["source"] == "evaluated"
