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
from pathlib import Path
from typing import Iterator

import dagster as dg
import pytest

from maya.pipelines.dashboard import PLOTS, dashboard_path
from maya.pipelines.defs import dashboard, estimators, profiles, validation
from maya.pipelines.partitions import partition_key
from maya.pipelines.resources import DataSources, Warehouse
from maya.pipelines.sources import NEUSIGHT_CAMPAIGN, Partition

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.PreviewWarning", "ignore::dagster.BetaWarning"), pytest.mark.slow]

SERVE = "import typer; from maya.cli.dashboard import dashboard_cmd; typer.run(dashboard_cmd)"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                  "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """A warehouse with one evaluated estimator version (trained on NeuSight's P4) and its dashboard."""
    root = tmp_path_factory.mktemp("dashboard")
    resources = {"warehouse": Warehouse(path=str(root / "warehouse.duckdb")),
                 "data": DataSources(profiles_dir=str(root / "profiles"), ground_truth_dir=str(root / "gt"))}
    p4 = Partition("p4", NEUSIGHT_CAMPAIGN)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("hardware", [p4.hardware])
    instance.add_dynamic_partitions("campaign", [p4.campaign])
    dg.materialize([profiles.raw_kernel_profiles, profiles.validated_kernel_profiles], instance=instance,
                   resources=resources, partition_key=partition_key(p4))
    dg.materialize([estimators.kernel_estimators, validation.estimator_validation, dashboard.accuracy_dashboard],
                   instance=instance, resources=resources, run_config={"ops": {"kernel_estimators": {"config": {
                       "sample_rows": 2000, "trees": 10, "depth": 3, "holdout": False}}}})
    return root / "warehouse.duckdb"


@pytest.fixture(scope="module")
def chromium() -> str:
    """A headless browser: Debian's chromium (.ci/run installs it); the test skips without one."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this in CI)")
    return found


@contextlib.contextmanager
def serving(warehouse: Path) -> Iterator[tuple[str, list[str]]]:
    """`maya dashboard --port 0` in another process: its URL and the lines it printed before serving."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "500"}
    server = subprocess.Popen([sys.executable, "-c", SERVE, "--port", "0", "--warehouse", str(warehouse)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url], capture_output=True,
                          text=True, timeout=180)
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
    assert "Predicted vs measured, per hardware" in dom and "p4 kernels" in dom


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
    with serving(home / "warehouse.duckdb") as (url, printed):
        assert printed[0] == f"built {page}"
        body = urllib.request.urlopen(url, timeout=30).read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "other", timeout=30)
    assert body == page.read_text(encoding="utf-8") and missing.value.code == 404


def test_without_evaluations_it_says_what_to_run(tmp_path):
    done = subprocess.run([sys.executable, "-c", SERVE, "--warehouse", str(tmp_path / "empty.duckdb")],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "500"}, timeout=120)
    assert done.returncode == 1
    assert "no estimator version has been evaluated" in done.stderr and "dagster dev" in done.stderr
