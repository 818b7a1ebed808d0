"""The profiler on a bare GPU host: a source checkout, nothing installed, only the standard library,
torch, numpy and pyarrow. Simulated by subprocesses that run without site processing (so no .pth
file installs Maya's editable package mapping) on a copy of site-packages, made of symbolic links,
that lacks Maya and the CLI's and pipelines' dependencies."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from paths import PROFILER_RUNNER, SRC

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ABSENT = ("duckdb", "pandera", "pandas", "typer", "rich", "dagster", "maya", "__editable__")


@pytest.fixture(scope="module")
def bare_site(tmp_path_factory) -> Path:
    """site-packages without the ABSENT distributions (and without .pth files)."""
    site = Path(torch.__file__).resolve().parents[1]
    farm = tmp_path_factory.mktemp("bare-site")
    for entry in site.iterdir():
        if not entry.name.lower().startswith(ABSENT) and entry.suffix != ".pth":
            (farm / entry.name).symlink_to(entry)
    return farm


def bare_host(code: str, cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.append({str(site)!r})\n" + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_runner_script_plans_a_campaign_on_a_bare_host(tmp_path, bare_site):
    out = bare_host(
        f"""
        import runpy
        sys.argv = [{str(PROFILER_RUNNER)!r}, "kernels", "--plan", "--out", "campaign", "--families", "memcpy,memset"]
        runpy.run_path({str(PROFILER_RUNNER)!r}, run_name="__main__")
    """,
        tmp_path,
        bare_site,
    )
    assert out.returncode == 0, out.stderr
    assert "88 configs to measure, 0 done" in out.stdout
    assert "memcpy" in out.stdout and "memset" in out.stdout


def test_runner_script_rejects_unknown_families(tmp_path):
    out = subprocess.run(
        [sys.executable, str(PROFILER_RUNNER), "kernels", "--out", "c", "--families", "gemm,nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "unknown family nope" in out.stderr


def test_campaign_runs_from_the_source_checkout_with_only_torch_numpy_pyarrow(tmp_path, bare_site):
    out = bare_host(
        f"""
        import json, runpy
        for name in {ABSENT!r}[:6]:
            try:
                __import__(name)
            except ImportError:
                continue
            raise SystemExit(f"{{name}} should be absent")
        runpy.run_path({str(PROFILER_RUNNER)!r})["register_source_packages"]()
        from maya.profiler.kernels.campaign import CampaignSettings, run_campaign
        from maya.profiler.kernels.campaign_store import read_measurements
        from maya.profiler.kernels.configs import KernelConfig
        from maya.profiler.kernels.timing import TimingSettings
        import maya.profiler.workloads.trace, maya_trace_spec.interop.kineto

        configs = [KernelConfig.make("mm", "fp32", m=32, n=32, k=32),
                   KernelConfig.make("rms_norm_fwd", "bf16", tokens=16, hidden=64)]
        settings = CampaignSettings(budget_s=60, timing=TimingSettings(warmup=1, min_repeats=3, max_repeats=3))
        result = run_campaign("campaign", settings, device="cpu", sweep=configs, log=lambda _: None)
        print(json.dumps({{
            "stop": result.stop_reason,
            "statuses": read_measurements("campaign").column("status").to_pylist(),
            "absent_loaded": sorted(m for m in sys.modules if m.lower().startswith({ABSENT!r}[:6])),
            "files": {{name: sys.modules[name].__file__ for name in
                      ("maya", "maya.profiler.kernels.campaign", "maya_trace_spec")}},
        }}))
    """,
        tmp_path,
        bare_site,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["stop"] == "complete" and report["statuses"] == ["ok", "ok"]
    assert report["absent_loaded"] == []
    assert report["files"] == {
        "maya": str(SRC / "maya" / "__init__.py"),
        "maya.profiler.kernels.campaign": str(SRC / "maya" / "profiler" / "kernels" / "campaign.py"),
        "maya_trace_spec": str(SRC / "maya_trace_spec" / "__init__.py"),
    }


def test_module_entry_point_when_installed(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "maya.profiler", "kernels", "--plan", "--out", "c", "--families", "memset"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "33 configs to measure, 0 done" in out.stdout
