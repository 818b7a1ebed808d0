"""Emulated ranks share Inductor's and Triton's caches: one folder per emulated device, oracle and versions."""

from pathlib import Path

import pytest
from paths import WORKLOADS

from maya import api
from maya.core import paths
from maya.core.hardware import get as get_hardware
from maya.emulator import launcher

ORACLE = '{"factory": "maya.emulator.device_time:roofline"}'


def test_the_cache_is_keyed_by_device_oracle_and_stubs(tmp_path):
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-sxm-80gb")
    one = launcher.compile_cache(tmp_path / "stubs1", h100, None)
    assert one == launcher.compile_cache(tmp_path / "stubs1", h100, None)
    assert one.parent == paths.compile_cache_root()
    others = {
        launcher.compile_cache(tmp_path / "stubs1", a100, None),
        launcher.compile_cache(tmp_path / "stubs1", h100, ORACLE),
        launcher.compile_cache(tmp_path / "stubs2", h100, None),
    }
    assert one not in others and len(others) == 3


def test_ranks_get_the_shared_cache_unless_the_user_named_one(tmp_path, monkeypatch):
    (tmp_path / "preload.txt").write_text("")  # the built stubs' preload list (none here)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/mine/triton")
    shared = tmp_path / "compile"
    env = launcher._rank_env(tmp_path, shared, tmp_path, tmp_path, 0, launcher.Topology(), 1234, None)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(shared / "inductor")
    assert env["TRITON_CACHE_DIR"] == "/mine/triton"


def test_ranks_compile_in_process_unless_the_user_asked_for_workers(tmp_path, monkeypatch):
    """Inductor's compile-worker pool is off in the ranks (`TORCHINDUCTOR_COMPILE_THREADS=1`); a user's value wins."""
    (tmp_path / "preload.txt").write_text("")
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    rank_env = lambda: launcher._rank_env(tmp_path, tmp_path, tmp_path, tmp_path, 0, launcher.Topology(), 1, None)  # noqa: E731
    assert rank_env()["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "8")
    assert rank_env()["TORCHINDUCTOR_COMPILE_THREADS"] == "8"


def files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


@pytest.mark.e2e
@pytest.mark.slow
def test_a_warm_rerun_compiles_nothing_and_predicts_the_same(tmp_path, monkeypatch):
    """Two ranks compile into one cache; a re-run finds every artifact there (it adds no file and benchmarks no
    kernel configuration) and its trace predicts the same steady iteration."""
    monkeypatch.setattr(paths, "compile_cache_root", lambda: tmp_path / "compile")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    script = [str(WORKLOADS / "compiled_mlp.py")]
    topology = launcher.Topology(nproc_per_node=2)
    cold = launcher.emulate(script, tmp_path / "cold", topology=topology, dedup=False)
    assert cold.status == "complete"
    (cache,) = (tmp_path / "compile").iterdir()
    compiled = files(cache)
    assert any(p.parts[0] == "triton" for p in compiled) and any(p.parts[0] == "inductor" for p in compiled)
    warm = launcher.emulate(script, tmp_path / "warm", topology=topology, dedup=False)
    assert warm.status == "complete"
    assert files(cache) == compiled
    options = api.PredictOptions(durations="roofline")
    first, again = api.predict(tmp_path / "cold", options), api.predict(tmp_path / "warm", options)
    assert timings(again) == timings(first)
    # the cold run's first iteration also benchmarked Inductor's kernel configurations (launches and buffers); the
    # warm run read the choices from the cache, as a GPU job with a warm cache does
    assert again.simulated_calls < first.simulated_calls and again.peak_memory_bytes <= first.peak_memory_bytes


def timings(prediction) -> tuple:
    """What a prediction says about the steady iteration, overall and per rank."""
    steady = ("iterations", "steady_iterations", "iteration_ns", "compute_ns", "exposed_comm_ns", "host_bound_ns")
    ranks = [(r.iteration_ns, r.compute_ns, r.exposed_comm_ns, r.host_bound_ns, r.mfu) for r in prediction.ranks]
    return tuple(getattr(prediction, name) for name in steady) + (prediction.mfu, ranks)
