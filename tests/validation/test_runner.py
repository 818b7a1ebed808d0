"""The suite machinery on a tiny synthetic suite (`tiny_kind`: a Linear layer on one virtual H100): rows
stored as they finish, identical commands emulated once, failing rows stored with their reason while the
suite goes on, re-runs resuming (idempotent), an interrupted run finishing on the next; and, with no
emulation, the warehouse table, the summary and `maya validate --json` / `--rows` errors."""

import json
import math

import duckdb
import pandas as pd
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.core.warehouse_schema import create_table
from maya.estimators import KernelEstimator, Registry
from maya.validation import load_suite, run_suite, runner, store, summarize, to_json
from maya.validation.plan import predictor_digest
from maya.validation.suites import Suite, _digest

KIND = "validation.tiny_kind"


@pytest.fixture
def warehouse(tmp_path):
    """A registered estimator version (roofline pricing: the figures do not matter here)."""
    path = tmp_path / "warehouse.duckdb"
    Registry(path).register(KernelEstimator(), data_hash="stub", config_hash="stub", metrics={})
    return path


@pytest.fixture
def tiny(monkeypatch) -> Suite:
    monkeypatch.setitem(runner.KINDS, "tiny", KIND)
    table = pd.DataFrame({"tokens": [256, 256, -1, 0, 512], "measured_s": [1e-3, 2e-3, 1e-3, 1e-3, 1e-3]})
    table.index.name = "row"
    return Suite("tiny", "tiny", runner.traces_dir(), table, _digest(table))


def stored_rows(warehouse) -> list[tuple]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return con.execute(
            'SELECT "row", status, predicted_s, trace_digest, estimator_version FROM validation_rows ORDER BY "row"'
        ).fetchall()
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_suite_runs_stores_resumes_and_reports_failures(tiny, warehouse, monkeypatch):
    calls = []
    original = runner._trace
    monkeypatch.setattr(runner, "_trace", lambda plan, root: calls.append(plan.key.row) or original(plan, root))
    rows = tiny.table.loc[[0, 1, 2, 3]]
    run = run_suite(tiny, rows, warehouse=warehouse)
    ok, same, failing, unplanned = run.results
    assert [r.status for r in run.results] == ["ok", "ok", "failed", "failed"]
    assert not ok.trace_reused and same.trace_reused and ok.command_hash == same.command_hash
    assert same.predicted_s == ok.predicted_s > 0 and same.trace_digest == ok.trace_digest
    assert same.error_pct == pytest.approx(100 * (same.predicted_s / 2e-3 - 1))
    assert ok.band_low_s <= ok.predicted_s <= ok.band_high_s and ok.in_band == (ok.band_low_s <= 1e-3 <= ok.band_high_s)
    assert "emulation failed" in failing.reason and failing.predicted_s is None
    assert unplanned.reason == "cannot run this row: tokens must not be 0" and 3 not in calls
    first = stored_rows(warehouse)
    assert [r[:2] for r in first] == [(0, "ok"), (1, "ok"), (2, "failed"), (3, "failed")]

    seen = []
    again = run_suite(tiny, rows, warehouse=warehouse, on_start=lambda total, done: seen.append((total, done)))
    assert seen == [(4, 2)]
    assert [r.resumed for r in again.results] == [True, True, False, False]
    assert calls.count(0) == 1 and calls.count(2) == 2  # finished rows are not run again; failed ones are
    assert stored_rows(warehouse) == first  # idempotent


@pytest.mark.slow
@pytest.mark.e2e
def test_an_interrupted_run_keeps_what_finished_and_the_next_one_completes(tiny, warehouse):
    rows = tiny.table.loc[[0, 4]]

    def stop(result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(tiny, rows, warehouse=warehouse, on_row=stop)
    assert [r[:2] for r in stored_rows(warehouse)] == [(0, "ok")]
    run = run_suite(tiny, rows, warehouse=warehouse)
    assert [(r.key.row, r.resumed, r.status) for r in run.results] == [(0, True, "ok"), (4, False, "ok")]


@pytest.mark.slow
@pytest.mark.e2e
def test_rows_run_in_worker_processes(tiny, warehouse):
    run = run_suite(tiny, tiny.table.loc[[0, 4]], warehouse=warehouse, jobs=2)
    assert [(r.key.row, r.status) for r in run.results] == [(0, "ok"), (4, "ok")], [r.reason for r in run.results]
    assert run.results[0].trace_digest != run.results[1].trace_digest and all(r.predicted_s > 0 for r in run.results)
    assert [r[:2] for r in stored_rows(warehouse)] == [(0, "ok"), (4, "ok")]


def result(
    row: int,
    error: float | None,
    *,
    version: str = "v1",
    suite: Suite | None = None,
    band=(0.9, 1.1),
    oom: bool = False,
    status: str = "ok",
    seq: int | None = 2048,
) -> store.RowResult:
    suite = suite or load_suite("llm-foundry-smoke")
    measured = 1.0 + row
    r = store.RowResult(
        suite.name,
        suite.digest,
        suite.kind,
        store.RowKey(
            row, f"row {row}", "h100_80gb" if row % 2 else "a100_80gb", "1b" if row < 100 else "125m", 8, measured
        ),
        version,
        predictor_digest(),
        status=status,
        hardware="h100-sxm",
        cluster="dgx-h100",
        oom=oom,
        seq=seq,
    )
    if error is not None:
        r.predicted_s, r.error_pct = measured * (1 + error / 100), error
        r.band_low_s, r.band_high_s = r.predicted_s * band[0], r.predicted_s * band[1]
        r.in_band = r.band_low_s <= measured <= r.band_high_s
    return r


@pytest.mark.slow
def test_saving_a_row_twice_keeps_one(tmp_path):
    path = tmp_path / "w.duckdb"
    store.save(result(20, 5.0), path)
    store.save(result(20, 7.0), path)
    store.save(result(20, 3.0, version="v2"), path)
    latest = store.latest(path)
    assert len(latest) == 2 and dict(zip(latest["estimator_version"], latest["error_pct"])) == {"v1": 7.0, "v2": 3.0}
    suite = load_suite("llm-foundry-smoke")
    assert list(store.stored(path, suite.digest, "v1", predictor_digest())) == [20]
    assert store.stored(path, suite.digest, "v1", "other code") == {}


def test_summary_by_gpu_size_gpu_count_and_sequence():
    results = [
        result(20, -10.0, band=(0.8, 1.2)),
        result(81, 20.0, band=(1.0, 1.1), seq=65536),
        result(159, 4.0, oom=True, seq=None),
        result(3, None, status="failed"),
    ]
    s = summarize(results)
    assert (s.rows, s.predicted, s.failed, s.out_of_memory) == (4, 3, 1, 1)
    assert s.mean_abs_error_pct == pytest.approx(34 / 3) and s.max_abs_error_pct == 20.0 and s.worst_row == 81
    assert s.coverage_pct == pytest.approx(100 * 2 / 3) and s.banded == 3
    assert s.by["GPU"].loc["h100_80gb", "rows"] == 2 and s.by["GPU"].loc["h100_80gb", "mean_error_pct"] == 12.0
    assert list(s.by["size"].index) == ["125m", "1b"] and s.by["GPUs"].loc[8, "max_abs_error_pct"] == 20.0
    # a row stored before the sequence length was (159) is left out of that group only
    assert list(s.by["sequence"].index) == [2048, 65536] and list(s.by["sequence"]["rows"]) == [1, 1]
    assert s.by["sequence"].loc[65536, "mean_error_pct"] == 20.0


@pytest.mark.slow
def test_a_warehouse_from_before_the_sequence_column_takes_new_rows(tmp_path):
    path = tmp_path / "w.duckdb"
    old_schema = create_table("validation_rows").replace("    seq                   INTEGER,\n", "")
    assert old_schema != create_table("validation_rows")
    con = duckdb.connect(str(path))
    con.execute(old_schema)
    row = {k: v for k, v in result(20, 5.0).record().items() if k != "seq"}
    names = ", ".join(f'"{k}"' for k in row)
    con.execute(f"INSERT INTO validation_rows ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    con.close()
    assert store.latest(path)["row"].tolist() == [20]
    store.save(result(81, 7.0, seq=8192), path)
    latest = store.latest(path)
    assert latest["row"].tolist() == [20, 81] and latest["seq"].isna().tolist() == [True, False]
    suite = load_suite("llm-foundry-smoke")
    assert {r.key.row: r.seq for r in store.stored(path, suite.digest, "v1", predictor_digest()).values()} == {
        20: None,
        81: 8192,
    }


@pytest.mark.slow
def test_validate_json_resumes_stored_rows(warehouse, monkeypatch):
    """`maya validate --json` on rows whose results are stored: nothing is emulated, the document has the
    issue's shape."""
    monkeypatch.setenv("MAYA_WAREHOUSE", str(warehouse))
    for row, error in ((81, 12.0), (159, -3.0), (20, None)):
        store.save(result(row, error, status="ok" if error is not None else "oom"), warehouse)
    out = CliRunner().invoke(app, ["validate", "llm-foundry-smoke", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert [r["row"] for r in doc["rows"]] == [20, 81, 159]
    assert set(doc["rows"][0]) >= {"row", "predicted_s", "measured_s", "error_pct"}
    assert doc["rows"][1]["error_pct"] == 12.0 and doc["rows"][0]["predicted_s"] is None
    assert doc["mean_abs_error_pct"] == pytest.approx(7.5) and doc["max_abs_error_pct"] == 12.0
    assert doc["estimator_version"] == "v1" and doc["by"]["GPU"][0]["key"] == "h100_80gb"
    assert math.isclose(doc["rows"][1]["measured_s"], 82.0) and doc["rows"][1]["seq"] == 2048
    assert doc["by"]["sequence"] == [
        {
            "key": 2048,
            "rows": 2,
            "mean_abs_error_pct": 7.5,
            "max_abs_error_pct": 12.0,
            "mean_error_pct": 4.5,
            "coverage_pct": 50.0,
        }
    ]

    table = CliRunner().invoke(app, ["validate", "llm-foundry-smoke", "--rows", "81"])
    assert table.exit_code == 0 and "+12.0%" in table.stdout and "1 row(s) resumed" in table.stdout


@pytest.mark.slow
def test_validate_rejects_bad_rows_and_missing_versions(tmp_path, monkeypatch):
    out = CliRunner().invoke(app, ["validate", "llm-foundry", "--rows", "gpus >"])
    assert out.exit_code == 2 and "--rows: cannot evaluate 'gpus >'" in out.stderr
    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "empty.duckdb"))
    out = CliRunner().invoke(app, ["validate", "llm-foundry", "--rows", "20"])
    assert out.exit_code == 1 and "maya estimators train" in out.stderr


def test_the_json_document_of_nothing():
    doc = to_json([], summarize([]), suite="s", version="v1")
    assert doc["rows"] == [] and doc["mean_abs_error_pct"] is None


@pytest.mark.slow
def test_a_rows_capture_key_follows_its_checkout_sources_and_the_installed_packages(tmp_path, monkeypatch):
    """Editing the checkout's package the script imports, or installing another release of any package, makes the
    row's emulation another one (its capture is not reused)."""
    from maya.emulator import capture_cache
    from maya.validation import plan as plans

    script = tmp_path / "pretrain_gpt.py"
    script.write_text("import megatron\n")
    package = tmp_path / "megatron"
    package.mkdir()
    (package / "core.py").write_text("LAYERS = 1\n")
    key = store.RowKey(row=0, label="r", gpu="a100_80gb", size="1b", gpus=8, measured_s=1.0)
    plan = plans.RowPlan(key=key, script=script, args=(), hardware="a100-sxm-80gb", cluster=None, sources=package)
    first = plan.command_hash()
    (package / "core.py").write_text("LAYERS = 2\n")
    plans.sources_digest.cache_clear()
    edited = plan.command_hash()
    assert edited != first
    site = tmp_path / "site"
    (site / "somelib-1.0.dist-info").mkdir(parents=True)
    (site / "somelib-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: somelib\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    capture_cache.installed_packages.cache_clear()
    assert plan.command_hash() != edited
    capture_cache.installed_packages.cache_clear()


@pytest.mark.slow
def test_a_row_whose_script_imports_te_installs_it_before_its_capture_key(tmp_path, monkeypatch):
    """The row's command hash digests the installed packages, so Transformer Engine is installed before it is
    computed (as `maya search` does): the capture is stored under the key the next run, with TE installed, looks up."""
    from maya import api
    from maya.emulator import capture_cache
    from maya.installer import transformer_engine
    from maya.validation import plan as plans

    script = tmp_path / "train_te.py"
    script.write_text("import transformer_engine.pytorch\n")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def ensure(needed_by: str) -> None:  # installs a distribution, as the real one does (a name no venv has, so
        # the digest changes where Transformer Engine is already installed too)
        info = site / "maya_te_stand_in-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: maya_te_stand_in\nVersion: 1.0\n")

    keys: list[str] = []

    def capture(argv, options, *, cache, key):
        keys.append(key)
        raise RuntimeError("not emulated here")

    monkeypatch.setattr(transformer_engine, "ensure", ensure)
    monkeypatch.setattr(api, "capture", capture)
    capture_cache.installed_packages.cache_clear()
    key = store.RowKey(row=0, label="r", gpu="h100_80gb", size="te", gpus=1, measured_s=1.0)
    plan = plans.RowPlan(key=key, script=script, args=(), hardware="h100-sxm", cluster=None)
    before = plan.command_hash()
    base = store.RowResult("s", "d", "tiny", key, "v1", predictor_digest())
    done = runner.evaluate(runner._Task(base, plan, KIND, None, str(tmp_path / "traces")))
    assert done.status == "failed" and "not emulated here" in done.reason
    capture_cache.installed_packages.cache_clear()
    assert keys == [plan.command_hash()] != [before] and done.command_hash == keys[0]
