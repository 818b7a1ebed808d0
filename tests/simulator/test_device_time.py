"""The device-time oracle's pricing (`maya.simulator.device_time`) and the template tile factor."""

import json

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware as catalog
from maya.simulator.device_time import oracle, resolve
from maya.simulator.launch_shape import launch_factor
from maya_trace_spec import conform

H100 = catalog.get("h100-sxm")  # 132 SMs


def frame(**columns) -> pd.DataFrame:
    return pd.DataFrame({c: np.asarray(v, dtype="float64") for c, v in columns.items()})


def busiest(tiles, tm, tn):
    return np.ceil(tiles / 132) * max(tm * tn, 64 * (tm + tn))


def test_tile_factor_is_the_busiest_sms_time_against_the_best_candidate_tile():
    f = frame(
        batch=[1, 1, 1, 1],
        m=[4096, 4096, 32, 4096],
        n=[4096, 4096, 1024, 4096],
        tile_m=[128, 64, 128, np.nan],
        tile_n=[128, 32, 128, np.nan],
    )
    factor = launch_factor(f, H100)
    best = min(busiest(1024, 128, 128), busiest(512, 256, 128))  # 4096^2: 8 waves of 128x128 or 4 of 256x128
    assert factor[0] == pytest.approx(busiest(1024, 128, 128) / best)
    assert factor[1] == pytest.approx(busiest(64 * 128, 64, 32) / best) and factor[1] > 2
    # a 32-row product: 8 tiles of 128x128 against 32 of 32x32, each one wave
    assert factor[2] == pytest.approx(busiest(8, 128, 128) / busiest(32, 32, 32))
    assert factor[3] == 1.0  # not a template


def test_tile_factor_never_speeds_up_a_call():
    f = frame(batch=[1], m=[16], n=[16], tile_m=[16], tile_n=[16])
    assert launch_factor(f, H100)[0] == 1.0


def test_oracle_prices_a_templates_configs_apart_and_a_cublas_gemm_as_the_best_tile():
    def note(bm, bn):
        return json.dumps(
            {
                "triton": {
                    "args": [
                        {"name": "arg_A", "dtype": "bfloat16", "shape": [2048, 1024], "bytes": 2048 * 1024 * 2},
                        {"name": "arg_B", "dtype": "bfloat16", "shape": [1024, 4096], "bytes": 1024 * 4096 * 2},
                        {"name": "out_ptr0", "dtype": "bfloat16", "shape": [2048, 4096], "bytes": 2048 * 4096 * 2},
                    ],
                    "constexprs": {"BLOCK_M": bm, "BLOCK_N": bn},
                }
            }
        )

    calls = conform(
        "api_calls",
        {
            "seq": [0, 1, 2],
            "api": ["cuLaunchKernel", "cuLaunchKernel", "cublasGemmEx"],
            "domain": ["driver", "driver", "cublas"],
            "start_ns": [0, 0, 0],
            "time_source": ["emulated"] * 3,
            "kernel_id": [0, 0, None],
            "gemm_m": [None, None, 4096],
            "gemm_n": [None, None, 2048],
            "gemm_k": [None, None, 1024],
            "gemm_batch": [None, None, 1],
            "gemm_dtype_a": [None, None, "bf16"],
            "args": [note(128, 128), note(32, 32), None],
        },
    ).to_pandas()
    kernels = conform("kernels", {"kernel_id": [0], "name": ["triton_tem_fused_mm_0"], "family": ["other"]}).to_pandas()
    ns = oracle("h100-sxm", "roofline").device_ns(calls, kernels)
    assert ns[0] == pytest.approx(ns[2])  # 512 128x128 tiles in 4 waves: as good as the best candidate
    assert ns[1] > 3 * ns[0]  # 8192 32x32 tiles: 63 waves, each streaming 4x what it computes


def test_resolve_names_the_oracle():
    assert resolve("host") == (None, "host time (no device-time oracle)")
    assert resolve("roofline") == ({"durations": "roofline"}, "roofline")
    options, described = resolve("estimators", "no-such-version")
    assert options == {"durations": "roofline"} and described.startswith("roofline (estimators not available")
    with pytest.raises(ValueError, match="unknown --device-time 'gpu'"):
        resolve("gpu")


def _register(warehouse, version: str, artifact: bytes) -> None:
    """A version row, the `latest` alias and an artifact file, as `maya.estimators.Registry.register` writes them."""
    import datetime
    import hashlib

    from maya.core.warehouse import insert_row, transaction

    (warehouse.parent / "estimators" / version).mkdir(parents=True)
    (warehouse.parent / "estimators" / version / "estimator.zip").write_bytes(artifact)
    with transaction(warehouse) as con:
        row = {
            "version": version,
            "created_at": datetime.datetime(2026, 11, 29),
            "data_hash": "d",
            "config_hash": "c",
            "hardware": ["h100-sxm"],
            "families": ["gemm"],
            "training_rows": 1,
            "metrics": "{}",
            "artifact_path": f"{version}/estimator.zip",
            "artifact_sha256": hashlib.sha256(artifact).hexdigest(),
            "artifact_bytes": len(artifact),
            "maya_version": "0",
        }
        insert_row(con, "estimator_versions", row)
        insert_row(con, "estimator_aliases", {"alias": "latest", "version": version})


def test_resolve_reads_the_registry_without_loading_estimators(tmp_path):
    """`maya emulate` names the estimator version from the warehouse alone: neither its registry nor XGBoost is
    imported in the launcher; a missing or altered artifact still falls back to the roofline."""
    import subprocess
    import sys

    warehouse = tmp_path / "warehouse.duckdb"
    _register(warehouse, "v7", b"artifact bytes")
    code = (
        "import sys; from maya.simulator.device_time import resolve; "
        f"print(resolve('estimators', 'latest', {str(warehouse)!r})); print('xgboost' in sys.modules or 'maya.estimators.registry' in sys.modules)"
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
