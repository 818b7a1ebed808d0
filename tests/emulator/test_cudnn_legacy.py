"""cuDNN's legacy API on virtual GPUs: RNNs (nn.LSTM / nn.GRU / nn.RNN), batch norm and CTC loss in
ordinary training scripts, recorded as the GEMMs and kernels cuDNN runs for them."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.simulator.trace import load
from maya.simulator.work import work_frame
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}


def emulate(tmp_path: Path, script: str, *script_args: str) -> tuple[str, Run]:
    """Emulates a workload; returns its output and trace (the run must complete)."""
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / script), *script_args])
    assert r.exit_code == 0, r.output
    assert Run(out).info["status"] == "complete"
    return r.output, Run(out)


def rnn_gemms(
    cell: str,
    hidden: int,
    inputs: int,
    layers: int,
    directions: int,
    batch_sizes: list[int],
    dtype: str,
    compute: str,
    forward: int = 1,
    backward: int = 1,
) -> Counter:
    """The GEMMs cuDNN's standard algorithm runs per layer and direction, as (api, m, n, k, batch,
    dtype, compute): forward, the input projection over every token then one recurrent GEMM per
    timestep over the sequences still running; backward data, a recurrent GEMM per timestep and the
    input gradient; backward weights, the input and recurrent weight gradients over every token."""
    work, tokens, out = Counter(), sum(batch_sizes), GATES[cell] * hidden
    for layer in range(layers):
        size = inputs if layer == 0 else hidden * directions
        for _ in range(directions):
            work[("cudnnRNNForward", tokens, out, size)] += forward
            work[("cudnnRNNBackwardData_v8", tokens, size, out)] += backward
            work[("cudnnRNNBackwardWeights_v8", out, size, tokens)] += backward
            work[("cudnnRNNBackwardWeights_v8", out, hidden, tokens)] += backward
            for b in batch_sizes:
                work[("cudnnRNNForward", b, out, hidden)] += forward
                work[("cudnnRNNBackwardData_v8", b, hidden, out)] += backward
    return Counter({(api, m, n, k, 1, dtype, compute): c for (api, m, n, k), c in work.items() if c})


def cudnn_calls(run: Run) -> list[dict]:
    calls = run.table("api_calls").filter(pc.field("domain") == "cudnn").to_pylist()
    kernels = {k["kernel_id"]: k["name"] for k in run.table("kernels").to_pylist()}
    ops = {o["op_id"]: o for o in run.table("ops").to_pylist()}
    return [{**c, "kernel": kernels.get(c["kernel_id"]), "op": ops[c["op_id"]]} for c in calls]


def gemms(calls: list[dict]) -> Counter:
    return Counter(
        (c["api"], c["gemm_m"], c["gemm_n"], c["gemm_k"], c["gemm_batch"], c["gemm_dtype_a"], c["gemm_compute_type"])
        for c in calls
        if c["gemm_m"] is not None
    )


def launches(calls: list[dict]) -> Counter:
    return Counter(c["kernel"] for c in calls if c["kernel"] is not None)


def test_bidirectional_lstm_and_gru_classifier(tmp_path):
    """Embedding 24 -> bidirectional 2-layer LSTM (hidden 40, dropout) -> GRU (hidden 40), batch 4 x 6
    tokens, 2 AdamW steps in fp32 (cuDNN's RNN GEMMs run on TF32 tensor cores)."""
    output, run = emulate(tmp_path, "lstm_classifier.py", "--steps", "2")
    assert "not part of single contiguous chunk" not in output  # torch found its weights where cuDNN lays them
    calls = cudnn_calls(run)
    steps, seq, batch = 2, 6, 4
    expected = rnn_gemms("lstm", 40, 24, 2, 2, [batch] * seq, "fp32", "tf32") + rnn_gemms(
        "gru", 40, 80, 1, 1, [batch] * seq, "fp32", "tf32"
    )
    assert gemms(calls) == Counter({key: steps * n for key, n in expected.items()})
    kernels = launches(calls)
    per_step = {
        "cudnn::rnn::LSTM_elementWise_fp": 2 * 2 * seq,
        "cudnn::rnn::LSTM_elementWise_bp": 2 * 2 * seq,
        "cudnn::rnn::GRU_elementWise_fp": seq,
        "cudnn::rnn::GRU_elementWise_bp": seq,
        "cudnn::rnn::dropout_elementWise_fp": 1,
        "cudnn::rnn::dropout_elementWise_bp": 1,
        "cudnn::rnn::bias_grad_reduce": 2 * 2 + 1,
    }
    assert kernels == Counter(
        {"cudnn::ops::dropout_init_states_kernel": 1, **{name: steps * n for name, n in per_step.items()}}
    )
    # a cell kernel covers one time step (batch x hidden), not the whole call its op describes
    cells = [c for c in calls if c["kernel"] and "elementWise" in c["kernel"] and "dropout" not in c["kernel"]]
    assert {json.loads(c["args"])["elements"] for c in cells} == {batch * 40}
    # and the simulator sizes each such kernel so, not by its op's inputs (every time step's)
    trace = load(run.path).ranks[0]
    work = work_frame(trace, np.zeros(len(trace.calls), dtype=np.int64))
    own = trace.calls["args"].fillna("").str.contains('"elements"').to_numpy()
    assert own.sum() >= len(cells)
    assert work["numel"].to_numpy()[own].tolist() == [
        float(json.loads(a)["elements"]) for a in trace.calls["args"][own]
    ]
    # each call carries its framework op and phase
    for c in calls:
        backward = c["api"] != "cudnnRNNForward" and not c["api"].startswith("cudnnSetDropout")
        assert c["op"]["phase"] == ("backward" if backward else "forward")
        assert c["op"]["name"] in {"aten::_cudnn_rnn_backward", "aten::_cudnn_rnn", "aten::_cudnn_init_dropout_state"}


def test_packed_sequences_and_tanh_rnn_under_fp16_autocast(tmp_path):
    """Packed sequences of lengths 6, 5, 4, 3: each timestep's recurrent GEMM covers only the sequences
    still running, the input GEMMs only real tokens; the tanh RNN on top runs on the padded output."""
    _, run = emulate(
        tmp_path, "lstm_classifier.py", "--steps", "1", "--packed", "--autocast", "fp16", "--top", "rnn_tanh"
    )
    calls = cudnn_calls(run)
    lengths = [6, 5, 4, 3]
    batch_sizes = [sum(n > t for n in lengths) for t in range(max(lengths))]
    assert batch_sizes == [4, 4, 4, 3, 2, 1]
    expected = rnn_gemms("lstm", 40, 24, 2, 2, batch_sizes, "fp16", "fp16") + rnn_gemms(
        "rnn_tanh", 40, 80, 1, 1, [4] * 6, "fp16", "fp16"
    )
    assert gemms(calls) == expected
    kernels = launches(calls)
    assert kernels["cudnn::rnn::RNN_tanh_elementWise_fp"] == kernels["cudnn::rnn::RNN_tanh_elementWise_bp"] == 6
    assert kernels["cudnn::rnn::LSTM_elementWise_fp"] == kernels["cudnn::rnn::LSTM_elementWise_bp"] == 2 * 2 * 6


def test_crnn_with_batch_norm_and_ctc_loss(tmp_path):
    """A spatial transformer (cuDNN's bilinear sampler), conv + fp32 BatchNorm2d (cuDNN's legacy batch
    norm), a bidirectional LSTM over 32 columns of batch 4 and cuDNN's CTC loss: 2 training steps, then
    an evaluation pass (an inference forward: no backward, no training batch norm)."""
    _, run = emulate(tmp_path, "crnn_lstm_ctc.py")
    calls = cudnn_calls(run)
    height, width, batch = 16, 32, 4
    rnn = Counter({key: n for key, n in gemms(calls).items() if key[0].startswith("cudnnRNN")})
    assert rnn == rnn_gemms("lstm", 32, 16, 1, 2, [batch] * width, "fp32", "tf32", forward=3, backward=2)
    by_api = Counter((c["api"], c["kernel"], c["grid_x"]) for c in calls if c["kernel"] and "rnn::" not in c["kernel"])
    assert by_api == Counter(
        {
            ("cudnnBatchNormalizationForwardTrainingEx", "cudnn::batchnorm_fw_tr_1C11_kernel_NCHW", 16): 2,
            ("cudnnBatchNormalizationBackwardEx", "cudnn::batchnorm_bw_1C11_kernel_new", 16): 2,
            ("cudnnBatchNormalizationForwardInference", "cudnn::batchnorm_fw_inf_1C11_kernel_NCHW", 16): 1,
            ("cudnnCTCLoss", "cudnn::ctc_loss_alpha_beta_kernel", batch): 2,
            # one thread per sampled pixel of the 1-channel image, 256 per block
            ("cudnnSpatialTfSamplerForward", "cudnn::spatialTf_sampler_fw_kernel", batch * height * width // 256): 3,
            ("cudnnSpatialTfSamplerBackward", "cudnn::spatialTf_sampler_bw_kernel", batch * height * width // 256): 2,
        }
    )
