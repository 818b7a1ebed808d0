"""Transformer Engine under emulation (the `te` extra; `MAYA_WITH_TE=1 scripts/setup`): its core library loads
beside the stubs and runs as its PyTorch extension drives it (`tests/workloads/te_core.py`, through its C API): a bf16
GEMM and an fp8 one (E4M3 operands with their inverse scales) through cuBLASLt, recorded with their shapes and types
and priced by the GEMM model (the fp8 one on the fp8 tensor-core peak), and its LayerNorm kernel, compiled by NVRTC
and launched through the driver; its PyTorch layers in bf16, fp8 and with DDP (`tests/workloads/te_layers.py`)."""

import importlib.util

import numpy as np
import pytest
from paths import WORKLOADS

from maya.core.hardware import get
from maya.estimators.hardware_table import hardware_arrays
from maya.estimators.segments import segments
from maya.simulator.opcodes import classify
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
    assert steps["fp8"] < steps["bf16"]
    out = tmp_path / "ddp"
    output, prediction = emulate_and_predict(
        out, ["torchrun", "--nproc_per_node=2", script, "--steps", "3"], "--nproc-per-node", "2"
    )
    assert "te steps 3" in output
    calls = load(out).ranks[0].calls
    assert (calls["collective_name"] == "allreduce").any()
    assert prediction["iteration_ms"] > 0
