"""Vidur's measurements: the mapping of its operators to priced calls, the row schemas and quarantine, layout
detection, the training sources, and `maya estimators eval` on every layout (MAPE checked by hand)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators import CollectiveModel, Registry, TrainConfig, train_version
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.families import PREDICTORS
from maya.estimators.training_data import rows_by_source, shipped_sources
from maya.estimators.vidur_data import (
    OPS,
    TWO_KERNEL_ADD,
    VidurFormatError,
    check_collectives,
    check_compute,
    detect_layout,
    vidur_dir,
)
from maya_trace_spec.interop.kineto import classify_kernel

runner = CliRunner()
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def compute() -> pd.DataFrame:
    return pd.read_parquet(vidur_dir() / "compute.parquet")


@pytest.fixture(scope="module")
def collectives() -> pd.DataFrame:
    return pd.read_parquet(vidur_dir() / "collectives.parquet")


def one(compute: pd.DataFrame, model: str, op: str, tp: int = 2, tokens: int = 512) -> pd.DataFrame:
    rows = compute[
        (compute["device"] == H100)
        & (compute["model"] == model)
        & (compute["op"] == op)
        & (compute["tp"] == tp)
        & (compute["num_tokens"] == tokens)
    ]
    return rows.head(1).reset_index(drop=True)


def test_every_operator_maps_to_the_call_traced_kernels_are_priced_as(compute):
    llama = "meta-llama/Llama-2-70b-hf"  # 64 heads, 8 kv heads, hidden 8192, ffn 28672, gated
    calls = check_compute(pd.concat([one(compute, llama, op) for op in OPS], ignore_index=True)).calls.set_index(
        "vidur_op"
    )
    up = one(compute, llama, "mlp_up_proj").iloc[0]
    gemm = calls.loc["mlp_up_proj"]  # cuBLAS's column-major sizes, as the emulator records F.linear
    assert (gemm["family"], gemm["op"], gemm["dtype"]) == ("gemm", "mm", "fp16")
    assert (gemm["m"], gemm["n"], gemm["k"]) == (up["gemm_n"], up["gemm_m"], up["gemm_k"]) == (28672, 512, 8192)
    assert calls.loc["mlp_up_proj", "measured_ns"] == pytest.approx(up["time_ms_median"] * 1e6)
    assert (calls["timing"] == "device").all() and (calls["source"] == "vidur").all()
    expected = {  # vidur op: family, op, numel, row, operands
        "input_layernorm": ("normalization", "vllm_rms_norm", 512 * 8192, 8192),
        "attn_rope": ("elementwise", "rotary_embedding", 512 * (64 + 8) // 2 * 128, 128, 1),
        "mlp_act": ("elementwise", "silu_and_mul", 512 * 28672 // 2, 28672 // 2, 2),
        "add": ("elementwise", "add", 512 * 8192, 8192, 2),
        "emb": ("embedding", "embedding", 512 * 8192, 8192),
    }
    for name, (family, op, numel, row, *operands) in expected.items():
        got = calls.loc[name]
        assert (got["family"], got["op"], got["numel"], got["row"]) == (family, op, numel, row), name
        if operands:
            assert got["operands"] == operands[0], name
    for _, call in calls.iterrows():  # every op is in its family's vocabulary: none is priced as unknown
        assert not np.isnan(PREDICTORS[call["family"]].op_codes(pd.DataFrame({"op": [call["op"]]}))[0]), call["op"]


def test_layer_norm_gelu_and_the_two_kernel_add_of_a_parallel_block(compute):
    phi = "microsoft/phi-2"
    rows = pd.concat([one(compute, phi, op, tp=1) for op in ("input_layernorm", "mlp_act", "add")], ignore_index=True)
    checked = check_compute(rows)
    ops = dict(zip(checked.calls["vidur_op"], zip(checked.calls["family"], checked.calls["op"])))
    assert ops == {"input_layernorm": ("normalization", "native_layer_norm"), "mlp_act": ("elementwise", "gelu")}
    assert checked.left_out == {TWO_KERNEL_ADD: 1} and checked.rejected.empty  # counted, not dropped silently


def test_the_families_match_how_traced_kernels_are_classified():
    """The kernels a training step launches for these ops land in the families the Vidur rows train."""
    names = {
        "normalization": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, true>",
        "elementwise": "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>",
        "gemm": "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_cgasize1x2x1_warpgroupsize2x1x1",
    }
    assert {family: classify_kernel(name)["family"] for family, name in names.items()} == {f: f for f in names}


def test_repeat_measurements_of_one_shape_are_kept_as_repeats(compute):
    keys = ["device", "model", "op", "tp", "num_tokens"]
    repeated = compute[compute.duplicated(keys, keep=False)]
    assert len(repeated) > 2000
    pair = repeated[repeated["op"] == "mlp_up_proj"].sort_values(keys).head(2)
    checked = check_compute(pair)
    assert len(checked.calls) == 2 and checked.rejected.empty
    assert checked.calls["measured_ns"].tolist() == (pair["time_ms_median"] * 1e6).tolist()


def test_bad_compute_rows_are_rejected_with_the_reason(compute):
    rows = pd.concat(
        [one(compute, "meta-llama/Llama-2-7b-hf", op) for op in ("add", "mlp_up_proj")] * 3, ignore_index=True
    )
    rows.loc[0, "time_ms_median"] = -1.0
    rows.loc[1, "time_ms_median"] = np.nan
    rows.loc[2, "device"] = "NVIDIA H300"
    rows.loc[3, "op"] = "attn_softmax"
    rows.loc[5, "gemm_k"] = pd.NA
    rows.loc[4, "num_tokens"] = 0
    checked = check_compute(rows)
    reasons = dict(zip(checked.rejected["row_index"], checked.rejected["reason"]))
    assert reasons[0] == "time_ms_median: not positive (-1.0)"
    assert reasons[1] == "time_ms_median: required (missing)"
    assert reasons[2] == "device: not in the hardware catalog ('NVIDIA H300')"
    assert reasons[3].startswith("op: not a Vidur operator (") and reasons[3].endswith("('attn_softmax')")
    assert reasons[4] == "num_tokens: not positive (0.0)"
    assert reasons[5] == "gemm_m, gemm_n, gemm_k: missing for a GEMM operator"
    assert checked.calls.empty  # nothing bad is trained on


def test_collectives_become_the_collective_model_frame_and_bad_rows_are_rejected(collectives):
    rows = collectives[(collectives["network"] == "a100_dgx") & (collectives["num_workers"] == 16)].head(3)
    rows = pd.concat([rows, collectives[collectives["collective"] == "send_recv"].head(1)], ignore_index=True)
    frame = check_collectives(rows).calls
    assert frame["collective"].tolist() == ["allreduce"] * 3 + ["sendrecv"]
    assert frame["bytes"].tolist() == rows["size_elements"].tolist()  # Vidur's profiler records bytes
    assert (frame.loc[:2, "ranks"] == 16).all() and (frame.loc[:2, "nodes"] == 2).all()  # 2 nodes of 8
    predicted = CollectiveModel("dgx-a100").predict(frame.iloc[:3])  # the model's public API takes it as it is
    assert (predicted["duration_ns"] > 0).all()
    bad = rows.assign(time_ms_median=[0.1, -0.1, 0.1, 0.1], dtype=["fp16", "fp16", "fp13", "fp16"])
    bad.loc[3, "devices_per_node"] = 4
    reasons = dict(zip(*check_collectives(bad).rejected[["row_index", "reason"]].to_numpy().T))
    assert reasons == {
        1: "time_ms_median: not positive (-0.1)",
        2: "dtype: not a known dtype ('fp13')",
        3: "devices_per_node: more than num_workers",
    }


def test_a_curve_copying_another_networks_measurements_is_quarantined(collectives):
    """Vidur's H100 pairwise send/recv repeats its A100 pairwise one value for value: not a measurement."""
    checked = check_collectives(collectives)
    copied = collectives["network"].eq("h100_pairwise_nvlink") & collectives["collective"].eq("send_recv")
    rejected = checked.rejected.set_index("row_index")["reason"]
    assert copied.sum() > 0 and set(np.flatnonzero(copied)) <= set(rejected.index)
    assert rejected[np.flatnonzero(copied)].str.contains("network a100_pairwise_nvlink value for value").all()
    assert not (
        (checked.calls["network"] == "h100_pairwise_nvlink") & (checked.calls["collective"] == "sendrecv")
    ).any()


def test_layouts_are_told_apart_by_their_columns(compute, collectives):
    from maya.estimators.neusight_data import neusight_dir

    neusight = pd.read_parquet(neusight_dir() / "kernels_test.parquet").head(1)
    assert [detect_layout(f.columns) for f in (neusight, compute, collectives)] == [
        "neusight",
        "vidur_compute",
        "vidur_collectives",
    ]
    with pytest.raises(VidurFormatError, match=r"closest is vidur_compute, missing column\(s\) time_ms_median"):
        detect_layout(compute.drop(columns=["time_ms_median"]).columns)
    with pytest.raises(VidurFormatError, match="not a measurement layout Maya reads"):
        detect_layout(["a", "b"])


@pytest.mark.slow
def test_training_uses_every_shipped_source_and_counts_rows_per_source_and_device():
    sources = shipped_sources(profiles=None)
    assert [s.name for s in sources] == ["neusight", "vidur"]
    table = rows_by_source(sources).set_index(["source", "hardware"])
    assert table.loc[("vidur", "h100-sxm"), "rows"] == 33_408 and table.loc[("vidur", "a40"), "rows"] > 0
    assert table.loc[("neusight", "t4"), "rows"] > 0 and (table["rejected"] == 0).all()
    assert sources[1].left_out == {TWO_KERNEL_ADD: 783}


@pytest.fixture(scope="module")
def version(tmp_path_factory, compute) -> str:
    """A small version trained on H100 rows of three models (the fourth, phi-2, is for evaluation)."""
    home = tmp_path_factory.mktemp("home")
    rows = compute[(compute["device"] == H100) & (compute["model"] != "microsoft/phi-2")]
    calls = check_compute(rows.sample(3000, random_state=0)).calls
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MAYA_HOME", str(home))
        train_version(calls, TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False), Registry())
    return str(home)


def maya(home: str, *args):
    return runner.invoke(app, [str(a) for a in args], env={"MAYA_HOME": home})


@pytest.mark.slow
def test_eval_of_vidur_compute_per_op_and_as_json(version, compute, tmp_path):
    rows = (
        compute[
            (compute["device"] == H100)
            & (compute["model"] == "microsoft/phi-2")
            & compute["op"].isin(["mlp_up_proj", "add", "input_layernorm"])
        ]
        .groupby("op")
        .head(15)
    )
    dataset = tmp_path / "phi.parquet"
    rows.to_parquet(dataset)
    r = maya(version, "estimators", "eval", "--dataset", dataset, "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    checked = check_compute(rows)
    predicted = Registry(f"{version}/warehouse.duckdb").load("latest").predict(checked.calls)["duration_ns"]
    ape = (predicted.to_numpy() / checked.calls["measured_ns"].to_numpy() - 1).__abs__()
    by_hand = pd.Series(ape).groupby(checked.calls["vidur_op"].to_numpy()).agg(["size", "mean"])
    assert set(result) == set(by_hand.index) == {"mlp_up_proj", "input_layernorm"}  # phi-2's add: left out
    for op, row in by_hand.iterrows():
        assert result[op]["rows"] == row["size"] and result[op]["mape"] == pytest.approx(100 * row["mean"], abs=1e-3)
    assert "left out: add of a parallel block" in r.stderr
    table = maya(version, "estimators", "eval", "--dataset", dataset)
    assert table.exit_code == 0 and re.search(r"mlp_up_proj\s*│\s*\d+\s*│\s*[\d.]+%", table.stdout)
    assert "vidur_compute" in table.stdout and "overall" in table.stdout


@pytest.mark.slow
def test_eval_of_vidur_collectives_through_the_collective_model(version, collectives, tmp_path):
    rows = collectives.groupby(["network", "collective"]).head(5)
    dataset = tmp_path / "nccl.parquet"
    rows.to_parquet(dataset)
    r = maya(version, "estimators", "eval", "--dataset", dataset, "--json", "--cluster", "dgx-a100")
    assert r.exit_code == 0, r.output
    frame = check_collectives(rows).calls
    predicted = CollectiveModel("dgx-a100").predict(frame[["collective", "bytes", "ranks", "nodes"]])["duration_ns"]
    ape = np.abs(predicted.to_numpy() / frame["measured_ns"].to_numpy() - 1)
    result = json.loads(r.stdout)
    kept = rows["collective"].to_numpy()[frame["row_index"].to_numpy()]  # copies are quarantined
    for name in ("all_reduce", "send_recv"):
        here = kept == name
        assert result[name] == {"rows": int(here.sum()), "mape": pytest.approx(100 * ape[here].mean(), abs=1e-3)}
    own = maya(version, "estimators", "eval", "--dataset", dataset, "--json")  # each network's own cluster
    assert own.exit_code == 0, own.output
    assert "a100_dgx" not in own.stderr  # its cluster (dgx-a100) is shipped


def test_eval_of_a_file_of_no_known_layout_is_a_clear_error(version, tmp_path):
    dataset = tmp_path / "other.parquet"
    pd.DataFrame({"kernel": ["x"], "time_ms": [1.0]}).to_parquet(dataset)
    r = maya(version, "estimators", "eval", "--dataset", dataset)
    assert r.exit_code == 1 and "not a measurement layout Maya reads" in r.stderr
