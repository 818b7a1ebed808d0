"""Training data: NeuSight's kernels and measured maya_trace_spec runs as measured calls; host overhead."""

import numpy as np
import pandas as pd
import pytest

from maya.estimators import HostOverheadModel, TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.host_overhead import DEFAULT_CLASS_NS, api_class
from maya.estimators.profile_data import load_profiles
from maya.estimators.training_data import load_kernels, neusight_dir, shipped_measurements
from maya_trace_spec import RunWriter


@pytest.mark.slow
def test_neusight_columns_map_to_call_frames():
    raw = pd.read_parquet(neusight_dir() / "kernels_test.parquet")
    calls = load_kernels(neusight_dir() / "kernels_test.parquet")
    assert len(calls) == len(raw)  # the test split has no convolutions
    bmm = raw[raw["op"] == "bmm"].iloc[0]
    row = calls[calls["op"] == "bmm"].iloc[0]
    # NeuSight multiplies [b, m, n] x [b, n, k]: n is the reduction, the row-major output is m x k, which cuBLAS
    # computes column-major as k x m (`calls.gemm_of_row_major`)
    assert (row["batch"], row["m"], row["n"], row["k"]) == (bmm["b"], bmm["k"], bmm["m"], bmm["n"])
    add = calls[calls["op"] == "add"].iloc[0]
    raw_add = raw[raw["op"] == "add"].iloc[0]
    assert add["numel"] == raw_add["b"] * raw_add["h"] and add["row"] == raw_add["h"] and add["operands"] == 2
    assert calls.loc[calls["op"] == "addu", "operands"].eq(1).all()
    assert set(calls["family"]) == {"gemm", "elementwise", "normalization", "softmax"}
    assert row["measured_ns"] == pytest.approx(bmm["latency_ms"] * 1e6)
    train_calls = load_kernels(neusight_dir() / "kernels_train.parquet")
    assert "conv" not in set(train_calls["op"])


def write_profile(run_dir):
    """A measured run: a traced cuBLAS GEMM, a linear whose kernels only the op describes (main + split-K
    reduction), an add, a memcpy, an all-reduce and an emulated launch (the last two not training data)."""
    w = RunWriter(run_dir)
    w.write(
        "run",
        {
            "run_id": ["p"],
            "created_at_ns": [0],
            "source": ["profiler"],
            "status": ["complete"],
            "world_size": [1],
            "hardware": ["h100-sxm"],
        },
    )
    w.write(
        "devices", {"device_index": [0], "device_name": ["NVIDIA H100 80GB HBM3"], "hardware": ["h100-sxm"]}, rank=0
    )
    w.write(
        "kernels",
        {
            "kernel_id": [0, 1, 2, 3],
            "name": ["sm90_gemm", "splitk_reduce", "add_kernel", "nccl"],
            "family": ["gemm", "gemm", "elementwise", "collective"],
        },
        rank=0,
    )
    w.write(
        "ops",
        {
            "op_id": [0, 1, 2],
            "name": ["aten::mm", "aten::linear", "aten::add"],
            "start_ns": [0, 10, 20],
            "input_shapes": [[[512, 256], [256, 128]], [[4, 8, 64], [32, 64], [32]], [[64, 1024], [64, 1024]]],
            "input_dtypes": [["c10::BFloat16"] * 2, ["float"] * 3, ["c10::BFloat16"] * 2],
        },
        rank=0,
    )
    w.write(
        "api_calls",
        {
            "seq": [0, 1, 2, 3, 4, 5, 6, 7],
            "api": [
                "cublasLtMatmul",
                "kernel",
                "kernel",
                "kernel",
                "cudaMemcpyAsync",
                "ncclAllReduce",
                "kernel",
                "cudaLaunchKernel",
            ],
            "domain": ["cublaslt", "device", "device", "device", "runtime", "nccl", "device", "runtime"],
            "start_ns": [0, 10, 12, 20, 30, 40, 41, 50],
            "duration_ns": [9000, None, None, None, 7000, 6000, None, 3000],
            "time_source": ["measured"] * 7 + ["emulated"],
            "op_id": [0, 1, 1, 2, None, None, None, 2],
            "kernel_id": [0, 0, 1, 2, None, 3, 3, 2],
            "device_duration_ns": [5000, 3000, 1000, 2000, 4500, 8000, 8000, 2000],
            "gemm_m": [512, None, None, None, None, None, None, None],
            "gemm_n": [128] + [None] * 7,
            "gemm_k": [256] + [None] * 7,
            "gemm_batch": [1] + [None] * 7,
            "gemm_dtype_a": ["bf16"] + [None] * 7,
            "bytes": [None, None, None, None, 1 << 20, None, None, None],
            "memcpy_kind": [None, None, None, None, "HtoD", None, None, None],
        },
        rank=0,
    )
    return run_dir


def test_profile_runs_become_measured_calls(tmp_path):
    write_profile(tmp_path / "profiles" / "h100-sxm" / "campaign-1")
    calls = load_profiles(tmp_path / "profiles").sort_values("measured_ns").reset_index(drop=True)
    assert list(calls["family"]) == ["elementwise", "gemm", "copy", "gemm"]
    add, linear, copy, mm = (calls.iloc[i] for i in range(4))
    assert (add["op"], add["dtype"], add["numel"], add["row"], add["operands"]) == ("add", "bf16", 65536, 1024, 2)
    assert (linear["op"], linear["measured_ns"]) == ("linear", 4000)  # both kernels of the op
    assert (linear["batch"], linear["m"], linear["n"], linear["k"], linear["dtype"]) == (1, 32, 32, 64, "fp32")
    assert (mm["m"], mm["n"], mm["k"], mm["dtype"], mm["measured_ns"]) == (512, 128, 256, "bf16", 5000)
    assert (copy["op"], copy["bytes"]) == ("HtoD", 1 << 20) and np.isnan(copy["numel"])
    assert set(calls["hardware"]) == {"h100-sxm"}


@pytest.mark.slow
def test_shipped_measurements_include_profiles_and_train(tmp_path):
    for i in range(3):
        write_profile(tmp_path / "profiles" / f"run-{i}")
    only_profiles = shipped_measurements(neusight=False, vidur=False, profiles=tmp_path / "profiles")
    assert len(only_profiles) == 12
    result = train(
        only_profiles, TrainConfig(params=ModelParams(n_estimators=5, max_depth=2), min_rows=3, validate=False)
    )
    assert result.metrics["hardware"] == ["h100-sxm"] and "gemm@tensor" in result.estimator.models
    neusight_only = shipped_measurements(vidur=False, profiles=tmp_path / "none")
    assert neusight_only.equals(load_kernels(neusight_dir() / "kernels_train.parquet"))


def test_host_overhead_defaults_and_calibration(tmp_path):
    model = HostOverheadModel()
    assert api_class("cudaLaunchKernel") == "launch" and api_class("cublasLtMatmul") == "library"
    assert api_class("ncclAllReduce") == "collective" and api_class("cudaGetDevice") == "other"
    np.testing.assert_array_equal(
        model.predict(pd.Series(["cudaLaunchKernel", "cudaMemcpyAsync", "cudaLaunchKernel"])),
        [DEFAULT_CLASS_NS["launch"], DEFAULT_CLASS_NS["copy"], DEFAULT_CLASS_NS["launch"]],
    )
    measured = pd.DataFrame(
        {
            "api": ["cudaLaunchKernel"] * 5 + ["cudaMemcpyAsync"] * 2,
            "duration_ns": [3000, 3100, 2900, 9000, 3050, 100, 100],
            "time_source": "measured",
        }
    )
    calibrated = HostOverheadModel.calibrated(measured)
    assert calibrated.api_ns("cudaLaunchKernel") == 3050  # the median of five measurements
    assert calibrated.api_ns("cudaMemcpyAsync") == DEFAULT_CLASS_NS["copy"]  # too few to calibrate
    run = write_profile(tmp_path / "run")
    from_run = HostOverheadModel.from_runs([run], min_calls=1)
    assert from_run.api_ns("cublasLtMatmul") == 9000  # measured once, calibrated with min_calls=1
    assert from_run.api_ns("cudaLaunchKernel") == DEFAULT_CLASS_NS["launch"]  # its only call was emulated
