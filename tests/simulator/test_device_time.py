"""The device-time oracle's pricing (`maya.simulator.device_time`) and the template tile factor."""

import json

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware as catalog
from maya.simulator.device_time import oracle
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
