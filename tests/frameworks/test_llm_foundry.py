"""llm-foundry / Composer on torch 2.7 (what llm-foundry 0.22 pins): its `scripts/train/train.py` with the
repository's small MPT yaml (`yamls/pretrain/testing.yaml`), unchanged, under `maya emulate --iterations`,
then `maya predict`. Offline: the yaml's downloads are stood in for by a synthetic MDS corpus and a
tokenizer trained on it (`tests/workloads/llm_foundry_data.py`), passed as llm-foundry's own command-line
overrides (`variables.data_local=`, `tokenizer.name=`).

The scripts and yamls live in llm-foundry's repository, not in its package: set MAYA_LLM_FOUNDRY_REPO to a
checkout of mosaicml/llm-foundry (tested at its 0.22 development head) to run this test; it skips otherwise.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from paths import REPO, WORKLOADS

from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TORCH = "2.7.0"
LLM_FOUNDRY = "llm-foundry==0.22.0"
REPO_ENV = "MAYA_LLM_FOUNDRY_REPO"


@pytest.fixture(scope="module")
def foundry(tmp_path_factory, checkout_build) -> tuple[Path, Path]:
    """(environment, llm-foundry checkout): torch 2.7.0 with Maya, then llm-foundry, which keeps that torch."""
    checkout = Path(os.environ.get(REPO_ENV, ""))
    if not (checkout / "scripts" / "train" / "train.py").is_file():
        pytest.skip(f"set {REPO_ENV} to a checkout of llm-foundry's repository (its train.py and yamls)")
    env = tmp_path_factory.mktemp("envs") / f"torch-{TORCH}"
    with checkout_build():  # installs Maya from this checkout
        p = subprocess.run([str(REPO / "scripts" / "torch_env"), TORCH, str(env)], capture_output=True, text=True)
    if p.returncode == 3:
        pytest.skip(f"torch {TORCH} cannot be installed here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    uv = REPO / ".venv" / "bin" / "uv"
    # llm-foundry imports pkg_resources, which setuptools 81 dropped
    p = subprocess.run(
        [str(uv), "pip", "install", "--quiet", "--python", str(env / "bin" / "python"), LLM_FOUNDRY, "setuptools<81"],
        capture_output=True,
        text=True,
    )
    if p.returncode:
        pytest.skip(f"{LLM_FOUNDRY} cannot be installed here: {p.stderr.strip()[-500:]}")
    version = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    assert version.startswith(TORCH), f"installing llm-foundry changed torch to {version}"
    return env, checkout


def test_llm_foundry_mpt_pretraining_emulates_and_predicts(foundry, tmp_path):
    env, checkout = foundry
    python, maya = env / "bin" / "python", env / "bin" / "maya"
    assets = tmp_path / "assets"
    subprocess.run([str(python), str(WORKLOADS / "llm_foundry_data.py"), str(assets)], check=True, capture_output=True)
    train = checkout / "scripts" / "train"
    out = tmp_path / "run"
    run_env = {**os.environ, "MAYA_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [
            str(maya),
            "emulate",
            "--iterations",
            "3",
            "--out",
            str(out),
            "--",
            "python",
            str(train / "train.py"),
            str(train / "yamls" / "pretrain" / "testing.yaml"),
            f"variables.data_local={assets / 'data'}",
            f"tokenizer.name={assets / 'tokenizer'}",
        ],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=tmp_path,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert Run(out).info["framework"].startswith(f"torch {TORCH}")
    p = subprocess.run(
        [str(maya), "predict", str(out), "--json"], capture_output=True, text=True, env=run_env, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    prediction = json.loads(p.stdout.strip().splitlines()[-1])
    assert prediction["steady_iterations"] >= 1 and prediction["iteration_ms"] > 0
