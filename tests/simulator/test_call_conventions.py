"""One GEMM convention and gathers sized by their output, whichever source describes a call: the same linear
layer from an emulated trace, a Kineto-imported trace, a measured run, NeuSight's, Vidur's and the profiler's
rows gets the same m, n, k (cuBLAS's column-major sizes, `maya.estimators.calls`), and an embedding's gather is
the embedding call Vidur's `emb` rows price."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators.neusight_data import neusight_dir, to_calls
from maya.estimators.profile_data import load_profiles
from maya.estimators.vidur_data import check_compute, vidur_dir
from maya.pipelines.measurement_calls import measurement_calls
from maya.simulator.trace import load
from maya.simulator.work import work_frame
from maya_trace_spec.interop.kineto import import_kineto

TOKENS, IN, OUT = 2048, 4096, 11008
"""`tests/workloads/linear_bf16.py`: Linear(4096 -> 11008) over 2048 tokens."""
FORWARD, GRAD_WEIGHT, GRAD_INPUT = (OUT, TOKENS, IN), (IN, OUT, TOKENS), (IN, TOKENS, OUT)
"""(m, n, k) of y = x Wᵀ, dW = dyᵀ x and dx = dy W as cuBLAS is called (the emulator's record)."""


def kineto(path: Path, ops: list[tuple[str, list[list[int]], str]]) -> Path:
    """A one-rank torch.profiler trace on an H100: each (aten op, input dims, kernel name) one op launching one
    kernel."""
    events, ts = [], 1000.0
    for i, (name, dims, kernel) in enumerate(ops):
        ext, corr = 10 + i, 100 + i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20.0,
                "args": {"External id": ext, "Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims)},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 5.0,
                "args": {"External id": ext, "correlation": corr},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": ts + 12,
                "dur": 30.0,
                "args": {
                    "External id": ext,
                    "device": 0,
                    "stream": 7,
                    "correlation": corr,
                    "grid": [1, 1, 1],
                    "block": [128, 1, 1],
                },
            },
        ]
        ts += 100.0
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
        ],
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off"
LINEAR_OPS = [
    ("aten::mm", [[TOKENS, IN], [IN, OUT]], GEMM_KERNEL),  # x @ Wᵀ (aten::linear's mm)
    ("aten::mm", [[OUT, TOKENS], [TOKENS, IN]], GEMM_KERNEL),  # dyᵀ @ x
    ("aten::mm", [[TOKENS, OUT], [OUT, IN]], GEMM_KERNEL),
]  # dy @ W


def mnk(frame: pd.DataFrame) -> list[tuple[float, float, float]]:
    gemm = frame[frame["family"] == "gemm"]
    return list(zip(gemm["m"], gemm["n"], gemm["k"]))


@pytest.mark.slow
def test_a_kineto_trace_and_a_measured_run_size_gemms_as_cublas_is_called(tmp_path):
    run_dir = import_kineto([kineto(tmp_path / "rank0.json", LINEAR_OPS)], tmp_path / "run", hardware="h100-sxm")
    trace = load(run_dir).ranks[0]
    assert mnk(work_frame(trace, np.zeros(len(trace.calls), dtype=np.int64))) == [FORWARD, GRAD_WEIGHT, GRAD_INPUT]
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    run_dir.rename(profiles / "run")
    assert mnk(load_profiles(profiles)) == [FORWARD, GRAD_WEIGHT, GRAD_INPUT]


@pytest.mark.slow
def test_dataset_rows_of_the_layer_use_the_same_convention():
    neusight = pd.DataFrame(
        {
            "op": ["linear"],
            "device": ["NVIDIA A100-PCIE-40GB"],
            "latency_ms": [1.0],
            "b": [1],
            "m": [TOKENS],
            "n": [IN],
            "k": [OUT],
        }
    )  # [m, n] x [n, k], n reduced
    assert mnk(to_calls(neusight)) == [FORWARD]
    raw = pd.read_parquet(vidur_dir() / "compute.parquet")
    row = raw[raw["op"] == "mlp_up_proj"].head(1).assign(gemm_m=TOKENS, gemm_n=OUT, gemm_k=IN, num_tokens=TOKENS)
    assert mnk(check_compute(row).calls) == [FORWARD]
    configs = pd.DataFrame(
        {
            "op": ["linear", "linear_grad_weight", "linear_grad_input"],
            "dtype": "bf16",
            "median_ns": 1.0,
            "batch": 1.0,  # the profiler's configs: output [m, n], reduction k
            "m": [TOKENS, OUT, TOKENS],
            "n": [OUT, IN, IN],
            "k": [IN, TOKENS, OUT],
        }
    )
    assert mnk(measurement_calls(configs)) == [FORWARD, GRAD_WEIGHT, GRAD_INPUT]


@pytest.mark.slow
def test_neusight_kernel_grids_are_the_tiles_of_the_convention():
    """NeuSight recorded each GEMM's kernel and grid: grid x covers m and grid y covers n in tiles of the
    kernel's name (`ampere_sgemm_32x128_tn`: 32 along m), for every row; its own m, n would not."""
    raw = pd.read_parquet(
        neusight_dir() / "kernels_train.parquet",
        columns=["op", "device", "latency_ms", "b", "m", "n", "k", "kernel_name", "grid_x", "grid_y"],
    )
    raw = raw[raw["op"].isin(["linear", "bmm"])].reset_index(drop=True)
    tiles = raw["kernel_name"].str.extract(r"_(\d+)x(\d+)_").astype("float64")
    named = tiles[0].notna().to_numpy()
    calls = to_calls(raw)
    assert named.mean() > 0.99
    assert (np.ceil(calls["m"] / tiles[0]) == raw["grid_x"])[named].all()
    assert (np.ceil(calls["n"] / tiles[1]) == raw["grid_y"])[named].all()


def test_an_embedding_gather_is_sized_by_the_rows_it_gathers(tmp_path):
    """torch's embedding runs index_select, which runs a gather kernel over an index expanded to the output:
    the call is an embedding lookup of tokens x hidden elements, as Vidur's `emb` rows measure, not the table."""
    vocab, hidden, tokens = 32000, 4096, 512
    kernel = (
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)"
    )
    path = kineto(
        tmp_path / "rank0.json",
        [
            ("aten::gather", [[vocab, hidden], [], [tokens, hidden], [], [tokens, hidden]], kernel),
            ("aten::index_select", [[vocab, hidden], [], [tokens]], "indexSelectLargeIndex"),
        ],
    )
    trace = load(import_kineto([path], tmp_path / "run", hardware="h100-sxm")).ranks[0]
    work = work_frame(trace, np.zeros(len(trace.calls), dtype=np.int64))
    calls = work[work["family"].notna()]
    assert calls["family"].tolist() == ["embedding", "embedding"]
    assert calls["numel"].tolist() == [tokens * hidden] * 2 and calls["row"].tolist() == [hidden] * 2
    raw = pd.read_parquet(vidur_dir() / "compute.parquet")
    emb = check_compute(raw[raw["op"] == "emb"].head(1).assign(num_tokens=tokens, n_embd=hidden)).calls
    assert (emb["family"].item(), emb["numel"].item(), emb["row"].item()) == ("embedding", tokens * hidden, hidden)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_emulated_layer_gets_the_same_sizes(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "linear_bf16.py"), "--tokens", str(TOKENS)]
    )
    assert r.exit_code == 0, r.output
    trace = load(out).ranks[0]
    emulated = mnk(work_frame(trace, np.zeros(len(trace.calls), dtype=np.int64)))
    assert emulated == [FORWARD, GRAD_WEIGHT, GRAD_INPUT]
    imported = import_kineto([kineto(tmp_path / "rank0.json", LINEAR_OPS)], tmp_path / "kineto", hardware="h100-sxm")
    kineto_trace = load(imported).ranks[0]
    assert mnk(work_frame(kineto_trace, np.zeros(len(kineto_trace.calls), dtype=np.int64))) == emulated
