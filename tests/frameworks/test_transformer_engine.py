"""Transformer Engine under emulation (the `te` extra; `MAYA_WITH_TE=1 scripts/setup`): its core library loads
beside the stubs and runs as its PyTorch extension drives it (`tests/workloads/te_core.py`, through its C API): a bf16
GEMM and an fp8 one (E4M3 operands with their inverse scales) through cuBLASLt, recorded with their shapes and types
and priced by the GEMM model (the fp8 one on the fp8 tensor-core peak), and its LayerNorm kernel, compiled by NVRTC
and launched through the driver; its PyTorch layers in bf16, fp8 and with DDP (`tests/workloads/te_layers.py`), their
own kernels priced by the work of the TE call that launched them; `te.GroupedLinear` in bf16 and fp8, and
`te.ops.GroupedLinear`'s cuBLASLt grouped GEMM failing with its reason (`tests/workloads/te_grouped_linear.py`)."""

import importlib.util

import numpy as np
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core.hardware import get
from maya.estimators.hardware_table import hardware_arrays
from maya.estimators.segments import segments
from maya.simulator.opcodes import classify
from maya.simulator.te_work import TE_KERNEL
from maya.simulator.trace import load
from maya.simulator.work import work_frame

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("transformer_engine") is None,
        reason="Transformer Engine is not installed (MAYA_WITH_TE=1 scripts/setup installs it)",
    ),
]


def test_te_core_gemm_and_layernorm_run_and_are_priced(tmp_path, emulate_and_predict):
    out = tmp_path / "run"
    output, prediction = emulate_and_predict(out, ["python", str(WORKLOADS / "te_core.py")])
    assert "te core ok" in output
    trace = load(out).ranks[0]
    calls = trace.calls
    gemms = calls[calls["api"] == "cublasLtMatmul"]
    assert gemms[["gemm_m", "gemm_n", "gemm_k"]].astype(int).values.tolist() == [[4096, 2048, 1024]] * 2
    assert gemms[["gemm_dtype_a", "gemm_dtype_b", "gemm_dtype_c"]].values.tolist() == [
        ["bf16", "bf16", "bf16"],
        ["fp8e4m3", "fp8e4m3", "bf16"],
    ]
    frame = work_frame(trace, classify(calls))
    gemm_work = frame.loc[gemms.index].copy()
    assert (gemm_work["family"] == "gemm").all() and gemm_work["flops"].tolist() == [2 * 4096 * 2048 * 1024] * 2
    assert gemm_work["dtype"].tolist() == ["bf16", "fp8"]
    gemm_work["hardware"] = "h100-sxm"
    hw = hardware_arrays(gemm_work)
    assert (segments("gemm", gemm_work, hw) == "tensor").all()
    assert np.allclose(hw.peak_flops, [get("h100-sxm").peak_flops("bf16"), get("h100-sxm").peak_flops("fp8")])
    kernels = trace.kernels.set_index("kernel_id")["name"]
    launched = calls[calls["api"] == "cuLaunchKernel"]["kernel_id"].astype(int)
    assert any("ln_fwd_tuned_kernel" in kernels[k] for k in launched)  # TE's NVRTC-compiled LayerNorm
    assert prediction["iteration_ms"] > 0


def test_te_layers_train_in_bf16_and_fp8_and_with_ddp(tmp_path, emulate_and_predict):
    """`te.Linear`, `te.LayerNormLinear`, `te.LayerNormMLP` and `te.TransformerLayer` train for three steps
    (`tests/workloads/te_layers.py`): in bf16, under `fp8_autocast` (its GEMMs recorded with fp8 operands, the
    step predicted shorter), and on two ranks with DDP (its gradients all-reduced)."""
    script = str(WORKLOADS / "te_layers.py")
    steps = {}
    for name, extra in (("bf16", []), ("fp8", ["--fp8"])):
        out = tmp_path / name
        output, prediction = emulate_and_predict(out, ["python", script, "--steps", "3", *extra])
        assert "te steps 3" in output
        gemms = load(out).ranks[0].calls.query("api == 'cublasLtMatmul'")
        assert len(gemms) > 0
        assert ("fp8e4m3" in set(gemms["gemm_dtype_a"])) == (name == "fp8")
        steps[name] = prediction["iteration_ms"]
        # TE's own kernels (LayerNorm, and in fp8 its casts, transposes, amax updates) are sized by their TE call
        trace = load(out).ranks[0]
        frame = work_frame(trace, classify(trace.calls))
        names = trace.calls["kernel_id"].map(trace.kernels.set_index("kernel_id")["name"]).fillna("")
        te = names.str.lower().str.contains(TE_KERNEL.pattern).to_numpy()
        assert te.sum() >= 12 and (frame.loc[te, "numel"] > 0).all()
        assert set(frame.loc[te, "family"]) <= {"normalization", "reduction", "elementwise", "other"}
        assert any(n.startswith("Transformer Engine's own kernels") for n in prediction["notes"])
        assert not any("have no sizes" in n for n in prediction["notes"])
    assert steps["fp8"] < steps["bf16"]
    out = tmp_path / "ddp"
    output, prediction = emulate_and_predict(
        out, ["torchrun", "--nproc_per_node=2", script, "--steps", "3"], "--nproc-per-node", "2"
    )
    assert "te steps 3" in output
    calls = load(out).ranks[0].calls
    assert (calls["collective_name"] == "allreduce").any()
    assert prediction["iteration_ms"] > 0


def test_te_grouped_linear_runs_and_its_grouped_gemm_fails_with_its_reason(tmp_path, emulate_and_predict):
    """`te.GroupedLinear` (4 experts) trains in bf16 and fp8, one cuBLASLt GEMM per expert; `te.ops.GroupedLinear`
    on Hopper takes cuBLASLt's grouped GEMM, whose per-group shapes are device values: it fails, saying so."""
    script = str(WORKLOADS / "te_grouped_linear.py")
    for name, extra in (("bf16", []), ("fp8", ["--fp8"])):
        out = tmp_path / name
        output, prediction = emulate_and_predict(out, ["python", script, "--steps", "3", *extra])
        assert "te grouped steps 3" in output
        gemms = load(out).ranks[0].calls.query("api == 'cublasLtMatmul'")
        # forward, input gradient and weight gradient of each of 4 experts, 3 steps
        assert len(gemms) == 3 * 3 * 4
        assert set(gemms["gemm_m"].astype(int)) <= {1024, 2048} and prediction["iteration_ms"] > 0
        assert ("fp8e4m3" in set(gemms["gemm_dtype_a"])) == (name == "fp8")
    r = CliRunner().invoke(app, ["emulate", "--out", str(tmp_path / "ops"), "--", "python", script, "--ops"])
    assert r.exit_code != 0
    assert "cuBLASLt's grouped GEMM reads every group's shape from device arrays" in r.output


def test_te_cudnn_layer_norm_graphs_are_priced_as_layer_norms(tmp_path, emulate_and_predict, monkeypatch):
    """With `NVTE_NORM_FWD_USE_CUDNN`/`NVTE_NORM_BWD_USE_CUDNN` TE runs its layer norms as cuDNN normalization graphs:
    each execution is one kernel over its input's elements, sized by its TE call and priced as torch's layer norm."""
    monkeypatch.setenv("NVTE_NORM_FWD_USE_CUDNN", "1")
    monkeypatch.setenv("NVTE_NORM_BWD_USE_CUDNN", "1")
    out = tmp_path / "run"
    output, prediction = emulate_and_predict(out, ["python", str(WORKLOADS / "te_layers.py"), "--steps", "3"])
    assert "te steps 3" in output
    trace = load(out).ranks[0]
    frame = work_frame(trace, classify(trace.calls))
    names = trace.calls["kernel_id"].map(trace.kernels.set_index("kernel_id")["name"]).fillna("")
    for direction, op in (("fwd", "native_layer_norm"), ("bwd", "native_layer_norm_backward")):
        graphs = frame[(names == f"cudnn_layer_norm_{direction}").to_numpy()]
        assert len(graphs) == 12  # the LayerNormLinear's, the LayerNormMLP's and the TransformerLayer's two, 3 steps
        assert (
            (graphs["op"] == op).all() and (graphs["numel"] == 512 * 4 * 1024).all() and (graphs["row"] == 1024).all()
        )
