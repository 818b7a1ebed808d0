"""`maya dashboard`: the accuracy dashboard built by the pipelines (one NeuSight GPU, training subsampled),
served on local HTTP and rendered by headless Chromium with no console message."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from maya.pipelines.dashboard import PLOTS, dashboard_path
from maya.pipelines.defs import dashboard, estimators, profiles, validation
from maya.pipelines.partitions import partition_key
from maya.pipelines.resources import DataSources, Warehouse
from maya.pipelines.sources import NEUSIGHT_CAMPAIGN, Partition

pytestmark = [
    pytest.mark.filterwarnings("ignore::dagster.PreviewWarning", "ignore::dagster.BetaWarning"),
    pytest.mark.slow,
]

SERVE = "import typer; from maya.cli.dashboard import dashboard_cmd; typer.run(dashboard_cmd)"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=10000",
    "--dump-dom",
)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """A warehouse with one evaluated estimator version (trained on NeuSight's P4) and its dashboard."""
    root = tmp_path_factory.mktemp("dashboard")
    resources = {
        "warehouse": Warehouse(path=str(root / "warehouse.duckdb")),
        "data": DataSources(profiles_dir=str(root / "profiles"), ground_truth_dir=str(root / "gt")),
    }
    p4 = Partition("p4", NEUSIGHT_CAMPAIGN)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("hardware", [p4.hardware])
    instance.add_dynamic_partitions("campaign", [p4.campaign])
    dg.materialize(
        [profiles.raw_kernel_profiles, profiles.validated_kernel_profiles],
        instance=instance,
        resources=resources,
        partition_key=partition_key(p4),
    )
    dg.materialize(
        [estimators.kernel_estimators, validation.estimator_validation, dashboard.accuracy_dashboard],
        instance=instance,
        resources=resources,
        run_config={
            "ops": {"kernel_estimators": {"config": {"sample_rows": 2000, "trees": 10, "depth": 3, "holdout": False}}}
        },
    )
    return root / "warehouse.duckdb"


@pytest.fixture(scope="module")
def chromium() -> str:
    """A headless browser: Debian's chromium (.ci/run installs it); the test skips without one."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this in CI)")
    return found


@contextlib.contextmanager
def serving(warehouse: Path, *args: str) -> Iterator[tuple[str, list[str]]]:
    """`maya dashboard --port 0` in another process: its URL and the lines it printed before serving."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "500"}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, "--port", "0", "--warehouse", str(warehouse), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in server.stdout:
            lines.append(line.strip())
            if found := re.search(r"http://127\.0\.0\.1:\d+/", line):
                yield found.group(0), lines
                return
        pytest.fail(f"maya dashboard exited: {lines}")
    finally:
        server.kill()  # not SIGTERM: a parent that ignores it (nohup, some CI runners) passes that on
        server.wait(timeout=30)


def render(chromium: str, url: str, profile: Path) -> tuple[str, list[str]]:
    """The DOM after the page ran, and the console messages it logged."""
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.chromium
def test_the_dashboard_renders_every_plot_with_no_console_message(warehouse, chromium, tmp_path):
    with serving(warehouse) as (url, _):
        dom, console = render(chromium, url, tmp_path / "profile")
    assert console == []
    for plot in PLOTS:
        assert re.search(rf'id="{plot}" class="[^"]*js-plotly-plot', dom), f"{plot} was not drawn"
    assert dom.count('class="main-svg"') >= 2 * len(PLOTS)  # each drawn plot has its svg layers
    assert "Kernels: predicted vs measured, per hardware" in dom and "p4 kernels" in dom
    assert "How well Maya predicts" in dom and "End to end: predicted vs measured" in dom


def test_console_messages_are_seen(chromium, tmp_path):
    """The check above can fail: a page that logs an error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('plot failed'); missing();</script></body></html>")
    _, console = render(chromium, page.as_uri(), tmp_path / "profile")
    assert any("plot failed" in line for line in console)
    assert any("missing is not defined" in line for line in console)


def test_serves_the_page_and_builds_it_when_missing(warehouse, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(warehouse.parent, home)
    page = dashboard_path(home / "warehouse.duckdb")
    page.unlink()
    with serving(home / "warehouse.duckdb", "--suite", "none") as (url, printed):
        assert f"built {page}" in printed
        body = urllib.request.urlopen(url, timeout=30).read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "other", timeout=30)
    assert body == page.read_text(encoding="utf-8") and missing.value.code == 404


def test_without_an_estimator_version_it_says_what_to_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SERVE, "--warehouse", str(tmp_path / "empty.duckdb")],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "500"},
        timeout=120,
    )
    assert done.returncode == 1
    assert "no estimator version is registered" in done.stderr and "maya demo" in done.stderr


@pytest.fixture
def fresh(tmp_path) -> Path:
    """A warehouse as `maya demo` leaves it: one registered version, nothing evaluated, no suite run."""
    from maya.estimators import Registry, TrainConfig, train_version
    from maya.estimators.efficiency_model import ModelParams
    from maya.estimators.training_data import shipped_measurements

    path = tmp_path / "warehouse.duckdb"
    sample = shipped_measurements().sample(2000, random_state=0)
    train_version(sample, TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False), Registry(path))
    return path


def test_the_dashboard_evaluates_the_latest_version_itself(fresh):
    from maya.pipelines.dashboard import build
    from maya.pipelines.dashboard_inputs import prepare

    steps = []
    assert prepare(fresh, suite=None, on_step=steps.append) == "v1"
    assert len(steps) == 1 and "evaluating estimator version v1 on 23,822 held-out kernels" in steps[0]
    prepare(fresh, suite=None, on_step=steps.append)
    assert len(steps) == 1  # evaluated once per set of inputs
    page, _ = build(fresh)
    text = page.read_text(encoding="utf-8")
    assert "no validation suite has been run for this version" in text
    assert all(f'id="{plot}"' in text for plot in PLOTS)


def test_the_dashboard_shows_suite_rows_at_a_glance(fresh):
    from maya.pipelines.dashboard import build
    from maya.pipelines.dashboard_inputs import prepare
    from maya.validation import load_suite, store
    from maya.validation.plan import predictor_digest

    suite = load_suite("llm-foundry-smoke")
    for row, error in ((20, -12.0), (81, 4.0)):
        measured = float(suite.table.loc[row, "step_time_s_derived"])
        predicted = measured * (1 + error / 100)
        store.save(
            store.RowResult(
                suite.name,
                suite.digest,
                suite.kind,
                store.RowKey(row, f"label {row}", "h100_80gb", "1b", 8, measured),
                "v1",
                predictor_digest(),
                status="ok",
                predicted_s=predicted,
                error_pct=error,
                band_low_s=predicted * 0.9,
                band_high_s=predicted * 1.1,
                in_band=row == 81,
            ),
            fresh,
        )
    store.save(
        store.RowResult(
            suite.name,
            suite.digest,
            suite.kind,
            store.RowKey(159, "label 159", "a100_40gb", "125m", 8, 1.0),
            "v1",
            predictor_digest(),
            status="failed",
            reason="emulation failed: boom",
        ),
        fresh,
    )
    prepare(fresh, suite=None, on_step=lambda _: None)
    text = build(fresh)[0].read_text(encoding="utf-8")
    assert "llm-foundry-smoke (end to end)</td><td>2 of 3</td>" in text
    assert '<td class="miss">8.0%</td><td>12.0%</td><td>50.0%</td>' in text
    assert "label 20 -12.0%" in text and "emulation failed: boom" in text


@pytest.mark.slow
@pytest.mark.e2e
def test_a_new_user_opens_the_dashboard_after_the_demo(fresh, tmp_path):
    """`maya dashboard` on a warehouse with only a version: it evaluates it, runs a validation suite (here a
    one-row file of the llm-foundry layout) with a progress bar, and serves a page with its figures."""
    from maya.validation import load_suite

    rows = tmp_path / "one_row.csv"
    load_suite("llm-foundry").table.loc[[81]].drop(
        columns=["model", "seq", "gpus", "gpu", "mbs", "ga", "precision", "sharding", "ckpt"]
    ).to_csv(rows, index=False)
    with serving(fresh, "--suite", str(rows)) as (url, printed):
        body = urllib.request.urlopen(url, timeout=30).read().decode()
    assert any("evaluating estimator version v1" in line for line in printed)
    assert any("suite rows" in line and "1/1" in line for line in printed)
    assert "one_row (end to end)</td><td>1 of 1</td>" in body
