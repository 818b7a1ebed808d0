"""Naming the device-time oracle for `maya emulate --device-time` (`maya.emulator.device_time.resolve`)."""

import hashlib
import subprocess
import sys

import pytest
from helpers import version_row

from maya.core.warehouse import insert_row, transaction
from maya.emulator.device_time import FACTORY, load, resolve, spec
from maya.simulator.device_time import oracle
from maya_trace_spec import conform


def test_resolve_names_the_oracle():
    assert resolve("host") == (None, "host time (no device-time oracle)")
    assert resolve("roofline") == ({"durations": "roofline"}, "roofline")
    options, described = resolve("estimators", "no-such-version")
    assert options == {"durations": "roofline"} and described.startswith("roofline (estimators not available")
    with pytest.raises(ValueError, match="unknown --device-time 'gpu'"):
        resolve("gpu")


def _register(warehouse, version: str, artifact: bytes) -> None:
    """A version row, the `latest` alias and an artifact file, as `maya.estimators.Registry.register` writes them."""
    (warehouse.parent / "estimators" / version).mkdir(parents=True)
    (warehouse.parent / "estimators" / version / "estimator.zip").write_bytes(artifact)
    with transaction(warehouse) as con:
        row = version_row(version, f"{version}/estimator.zip", hashlib.sha256(artifact).hexdigest(), len(artifact))
        insert_row(con, "estimator_versions", row)
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": version})


@pytest.mark.slow
def test_resolve_reads_the_registry_without_loading_estimators(tmp_path):
    """`maya emulate` names the estimator version from the warehouse alone: neither its registry, XGBoost, the simulator nor pandas is
    imported in the launcher; a missing or altered artifact still falls back to the roofline."""
    warehouse = tmp_path / "warehouse.duckdb"
    _register(warehouse, "v7", b"artifact bytes")
    code = (
        "import sys; from maya.emulator.device_time import resolve; "
        f"print(resolve('estimators', 'latest', {str(warehouse)!r})); print(any(m in sys.modules for m in ('xgboost', 'maya.estimators.registry', 'maya.simulator', 'pandas')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        str(({"durations": "estimators", "version": "v7", "warehouse": str(warehouse)}, "estimators v7")),
        "False",
    ]
    assert resolve("estimators", "v7", str(warehouse))[1] == "estimators v7"
    (tmp_path / "estimators" / "v7" / "estimator.zip").write_bytes(b"altered")
    options, described = resolve("estimators", "latest", str(warehouse))
    assert options == {"durations": "roofline"} and "corrupted" in described
    (tmp_path / "estimators" / "v7" / "estimator.zip").unlink()
    assert "missing" in resolve("estimators", "v7", str(warehouse))[1]


@pytest.mark.slow
def test_a_rank_whose_estimator_cannot_load_times_by_the_roofline_and_says_why(tmp_path):
    """`resolve` names `estimators v7` from the registry alone; the rank that loads it finds its artifact
    unreadable (registered intact, but not an estimator archive) and prices its timings by the roofline."""
    warehouse = tmp_path / "warehouse.duckdb"
    _register(warehouse, "v7", b"artifact bytes")
    options, described = resolve("estimators", "latest", str(warehouse))
    assert described == "estimators v7"
    value = spec(FACTORY, hardware="h100-sxm", **options)
    estimated = load(value)
    assert estimated.name.startswith("roofline on h100-sxm (estimators not available")
    assert "estimator version v7" in estimated.name and "cannot be read" in estimated.name
    calls = conform(
        "api_calls",
        {
            "seq": [0],
            "api": ["cublasGemmEx"],
            "domain": ["cublas"],
            "start_ns": [0],
            "time_source": ["emulated"],
            "gemm_m": [4096],
            "gemm_n": [2048],
            "gemm_k": [1024],
            "gemm_batch": [1],
            "gemm_dtype_a": ["bf16"],
        },
    ).to_pandas()
    kernels = conform("kernels", {"kernel_id": [], "name": [], "family": []}).to_pandas()
    ns = estimated.device_ns(calls, kernels)
    assert ns[0] > 0 and ns == pytest.approx(oracle("h100-sxm", "roofline").device_ns(calls, kernels))
