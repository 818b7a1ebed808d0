"""Maya in the environment of an older torch built for CUDA 12 (torch 2.5.1, the registry's CUDA 12.4 build):
installing Maya keeps that torch, and a training script is emulated and predicted there, on stubs built for
the CUDA 12 libraries that torch links.

The environment is made by scripts/torch_env (uv: the wheels are downloaded once, later runs link them
from uv's cache in seconds). The test skips, saying why, only when the torch wheel cannot be fetched.
"""

import json
import os
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pytest
from paths import EXAMPLE, REPO

from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OLD_TORCH = "2.5.1"


@pytest.fixture(scope="module")
def old_torch(tmp_path_factory, checkout_build) -> Path:
    """The environment's folder: torch 2.5.1 from the registry, then `maya[emulator]` installed beside it."""
    env = tmp_path_factory.mktemp("envs") / f"torch-{OLD_TORCH}"
    with checkout_build():  # installs Maya from this checkout
        p = subprocess.run([str(REPO / "scripts" / "torch_env"), OLD_TORCH, str(env)], capture_output=True, text=True)
    if p.returncode == 3:
        pytest.skip(f"torch {OLD_TORCH} cannot be installed here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    return env


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)


def test_installing_maya_keeps_the_environments_torch(old_torch):
    p = _run([old_torch / "bin" / "python", "-c", "import torch; print(torch.__version__, torch.version.cuda)"])
    assert p.stdout.split() == [f"{OLD_TORCH}+cu124", "12.4"], p.stderr


def test_a_cuda_12_torch_emulates_and_predicts(old_torch, tmp_path, emulator_cache):
    out = tmp_path / "run"
    env = {**os.environ, "MAYA_HOME": str(tmp_path / "home"), "MAYA_EMULATOR_CACHE": str(emulator_cache)}
    p = _run(
        [old_torch / "bin" / "maya", "emulate", "--out", out, "--", "python", EXAMPLE, "--bf16"], env=env, cwd=tmp_path
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert validate_run(out) == []
    run = Run(out)
    assert (run.info["status"], run.info["framework"], run.info["cuda_version"]) == (
        "complete",
        f"torch {OLD_TORCH}+cu124",
        "12.4",
    )
    # the stubs stood in for torch's CUDA 12 libraries
    preload = [
        (d / "preload.txt").read_text().split() for d in emulator_cache.iterdir() if (d / "preload.txt").exists()
    ]
    assert any({"libcudart.so.12", "libcublas.so.12", "libcufft.so.11"} <= set(names) for names in preload)
    assert "unimplemented CUDA API" not in p.stdout + p.stderr  # every call this torch made is emulated
    calls, kernels = run.table("api_calls"), run.table("kernels")
    apis = set(calls.column("api").to_pylist())
    assert "cudaLaunchKernel" in apis  # CUDA 12 code launches through the runtime's cudaLaunchKernel
    names = set(kernels.column("name").to_pylist())
    assert any("layer_norm" in n for n in names) and any("elementwise" in n for n in names)
    gemms = calls.filter(pc.is_valid(calls.column("gemm_m")))
    assert set(gemms.column("gemm_dtype_a").to_pylist()) == {"bf16"}  # bf16 autocast
    assert {a for a in apis if a.startswith("nvrtc")} <= {"nvrtcCreateProgram", "nvrtcCompileProgram"}
    p = _run([old_torch / "bin" / "maya", "predict", out, "--json"], env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    prediction = json.loads(p.stdout.strip().splitlines()[-1])
    assert prediction["iteration_ms"] > 0 and prediction["steady_iterations"] >= 1
    assert prediction["peak_memory_bytes"] > 0


def test_a_cuda_12_torch_ddp_shuts_down_without_its_watchdog_spinning(old_torch, tmp_path, emulator_cache):
    """torch 2.5's NCCL process group polls its works from a watchdog thread and, at shutdown, spins until they
    are complete. Polls find work behind a collective running (native/completion.c), but polls by a thread that
    issues no device work stop doing so after a few dozen: without that bound the watchdog spun for the 2 s the
    work took to settle, 100,000 polls a rank, and flushing its records at exit raced the spin (a corrupt
    capture)."""
    out = tmp_path / "run"
    env = {**os.environ, "MAYA_HOME": str(tmp_path / "home"), "MAYA_EMULATOR_CACHE": str(emulator_cache)}
    p = _run(
        [
            old_torch / "bin" / "maya",
            "emulate",
            "--out",
            out,
            "--nproc-per-node",
            "2",
            "--no-dedup",
            "--iterations",
            "0",
            "--",
            "python",
            REPO / "tests" / "workloads" / "ddp_mlp.py",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    calls = Run(out).table("api_calls").to_pandas()
    polls = calls[calls["api"] == "cudaEventQuery"]
    assert (polls["status"] != 0).sum() < 1000, polls.groupby(["rank", "thread_id", "status"]).size()
    assert (calls["api"] == "cudaStreamWaitEvent").groupby(calls["rank"]).sum().tolist() == [20, 20]
