"""The MPT workload (src/maya/data/workloads/mpt.py) reproduces the published llm-foundry rows: every row's
parameter count, its command line, the model's arithmetic on the CPU, Composer's optimizer, and (slow)
an emulated FSDP run with the collectives and attention the rows ran."""

import csv
import importlib.util
import json
import sys
from collections import Counter

import pyarrow.compute as pc
import pytest
import torch
from paths import SHIPPED_WORKLOADS as WORKLOADS
from paths import SRC
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators import KernelEstimator, Registry
from maya.installer import transformer_engine
from maya.validation import llm_foundry, load_suite, run_suite
from maya.validation.runner import traces_dir
from maya_trace_spec import Run

TABLE = SRC / "maya" / "data" / "published" / "llm_foundry_mpt.csv"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"workload_{name}", WORKLOADS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"workload_{name}"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mpt = _load("mpt")
mpt_rows = _load("mpt_rows")
ROWS = list(csv.DictReader(TABLE.open()))


def test_the_table_is_the_published_one():
    assert len(ROWS) == 162
    assert {r["GPU"] for r in ROWS} == {"a100_40gb", "a100_80gb", "h100_80gb"}


def _model_sizes() -> list:
    """Every (model, sequence length) of the table: the shortest sequence of each model on the fast path, the
    others `slow` (building each model on the meta device takes ~0.15 s; the closed form is checked on every
    row below)."""
    pairs = sorted({(r["Model"], int(r["SeqLen (T)"])) for r in ROWS})
    shortest = {model: min(seq for m, seq in pairs if m == model) for model, _ in pairs}
    return [pytest.param(model, seq, marks=() if seq == shortest[model] else pytest.mark.slow) for model, seq in pairs]


@pytest.mark.parametrize("model, seq", _model_sizes())
def test_parameter_count_matches_every_row(model, seq):
    """Exact, for all 162 rows: learned positions grow the count by d_model per token of sequence, biases
    and LayerNorms are in its constant part, the output projection is the (tied) embedding."""
    published = {int(r["NumParams"]) for r in ROWS if r["Model"] == model and int(r["SeqLen (T)"]) == seq}
    cfg = mpt.MPTConfig.of(model, seq)
    assert published == {mpt.count_params(cfg)} == {cfg.num_params()}


def test_the_closed_form_count_matches_every_row():
    """The closed form alone, for all 162 rows at once (cheap: no model is built)."""
    for r in ROWS:
        assert mpt.MPTConfig.of(r["Model"], int(r["SeqLen (T)"])).num_params() == int(r["NumParams"]), r


def _tiny(attn_impl: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = mpt.MPTForCausalLM(
        mpt.MPTConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=64), attn_impl=attn_impl
    )
    for module in model.modules():
        mpt.init_params(module, 2)
    return model


def test_model_on_cpu_ties_the_output_to_the_embedding():
    model = _tiny("triton")
    ids = torch.randint(0, 64, (3, 16))
    logits = model(ids)
    assert logits.shape == (3, 16, 64)
    logits.sum().backward()
    emb = model.transformer.wte.weight
    assert emb.grad is not None and not any(p is emb for n, p in model.named_parameters() if "wte" not in n)


def test_positions_follow_the_attention_mask_per_sequence():
    """llm-foundry's learned positions: one row per sequence, shifted past left padding (so the position
    embedding's backward covers every token, not one sequence's worth)."""
    model = _tiny("triton")
    seen = []
    model.transformer.wpe.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    ids = torch.randint(0, 64, (2, 4))
    model(ids, torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
    model(ids)  # no mask: the collator's all-ones one
    assert seen[0].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert seen[1].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]


@pytest.mark.parametrize(
    "attn_impl, range_name", [("flash", mpt.PACKAGE_ATTENTION_RANGE), ("triton", mpt.TRITON_ATTENTION_RANGE)]
)
def test_each_attention_path_runs_sdpa_inside_the_range_naming_the_kernel_it_measured(attn_impl, range_name):
    """The simulator prices SDPA's kernels by the kernel the published rows ran, which each path's range names
    (`attention_shapes`): flash-attn's package for `flash`, llm-foundry's Triton kernel for `triton`; each block's
    SDPA call runs inside its path's range and no other."""
    from torch.profiler import ProfilerActivity, profile

    model = _tiny(attn_impl)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randint(0, 64, (2, 16)))
    events = prof.events()
    ranges = [e for e in events if e.name in (mpt.PACKAGE_ATTENTION_RANGE, mpt.TRITON_ATTENTION_RANGE)]
    sdpa = [e for e in events if e.name == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 2 and {r.name for r in ranges} == {range_name} and len(ranges) == 2
    inside = [
        s
        for s in sdpa
        if any(r.time_range.start <= s.time_range.start and s.time_range.end <= r.time_range.end for r in ranges)
    ]
    assert inside == sdpa


def test_flash_path_computes_what_the_fused_path_does():
    """flash-attn's unpad / attend / pad on an all-ones mask changes nothing but the work done."""
    ids = torch.randint(0, 64, (2, 16))
    fused, flash = _tiny("triton"), _tiny("flash")
    flash.load_state_dict(fused.state_dict())
    out_fused, out_flash = fused(ids), flash(ids)
    torch.testing.assert_close(out_flash, out_fused)
    out_fused.square().mean().backward()
    out_flash.square().mean().backward()
    for (name, a), (_, b) in zip(fused.named_parameters(), flash.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=name)


def test_low_precision_layernorm_runs_in_the_autocast_dtype():
    norm = mpt.LowPrecisionLayerNorm(8)
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert norm(x).dtype == torch.bfloat16
    assert norm(x).dtype == torch.float32


def test_decoupled_adamw_without_weight_decay_is_adam():
    torch.manual_seed(0)
    a = torch.randn(5, requires_grad=True)
    b = a.detach().clone().requires_grad_(True)
    ours, ref = mpt.DecoupledAdamW([a], lr=0.1), torch.optim.Adam([b], lr=0.1, betas=(0.9, 0.95), eps=1e-8)
    for _ in range(3):
        grad = torch.randn(5)
        a.grad, b.grad = grad.clone(), grad.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "7b", "--seq-len", "2048", "--grad-accum", "1"], "--micro-batch is required"),
        (["--model", "7b", "--seq-len", "2048", "--micro-batch", "2"], "give --grad-accum or --global-batch"),
        (
            ["--model", "7b", "--seq-len", "0", "--micro-batch", "2", "--grad-accum", "1"],
            "--seq-len must be at least 1",
        ),
        (["--model", "9b", "--seq-len", "2048"], "invalid choice: '9b'"),
        (
            [
                "--model",
                "7b",
                "--seq-len",
                "2048",
                "--micro-batch",
                "2",
                "--grad-accum",
                "1",
                "--activation-cpu-offload",
            ],
            "--activation-cpu-offload is not supported",
        ),
    ],
)
def test_bad_command_lines_are_named(capsys, argv, message):
    with pytest.raises(SystemExit):
        mpt.parse_args(argv)
    assert message in capsys.readouterr().err


def test_micro_batches_follow_composer():
    args = mpt.parse_args(["--model", "1b", "--seq-len", "2048", "--micro-batch", "11", "--global-batch", "96"])
    assert mpt.micro_batches(args, world=2) == [11, 11, 11, 11, 4]  # 48 a rank: the README's example
    args = mpt.parse_args(["--model", "1b", "--seq-len", "2048", "--micro-batch", "4", "--grad-accum", "3"])
    assert mpt.micro_batches(args, world=8) == [4, 4, 4]
    args = mpt.parse_args(
        ["--model", "1b", "--seq-len", "2048", "--micro-batch", "4", "--grad-accum", "2", "--global-batch", "96"]
    )
    with pytest.raises(SystemExit, match="makes 3 micro-batches per step, not --grad-accum 2"):
        mpt.micro_batches(args, world=8)
    with pytest.raises(SystemExit, match="not divisible by the 7 ranks"):
        mpt.micro_batches(args, world=7)


@pytest.mark.parametrize("index", range(len(ROWS)))
def test_every_row_becomes_a_command_line(index):
    row = ROWS[index]
    args = mpt.parse_args(mpt_rows.workload_args(row))
    sizes = mpt.micro_batches(args, world=int(row["# GPUs"]))
    assert sizes == [int(row["MicroBatchSize"])] * int(row["GradAccum"])
    assert (args.precision, args.mp_mode, args.sharding) == (row["Precision"], row["MP Mode"], row["Sharding Strategy"])
    assert args.activation_checkpointing == (row["Activation Checkpointing"] == "True")
    assert args.use_orig_params == (row["Precision"] != "bf16")  # torch 1.13 had flat parameters only
    large = "Large Scale" in row["table"]
    assert (args.backward_prefetch, args.forward_prefetch) == (
        ("BACKWARD_PRE", True) if large else ("BACKWARD_POST", False)
    )
    assert args.attn_impl == ("flash" if large and row["Model"] in {"1b", "3b", "7b", "70b"} else "triton")


def test_fp8_without_transformer_engine_says_so():
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed here")
    with pytest.raises(SystemExit, match="needs NVIDIA Transformer Engine"):
        mpt.require_fp8()


@pytest.mark.parametrize(
    "error",
    [
        "OSError('libnccl.so.2: cannot open shared object file')",
        "AssertionError('transformer_engine_torch 2.1 does not match transformer_engine 2.20')",
        "RuntimeError('no CUDA runtime')",
    ],
    ids=["OSError", "AssertionError", "RuntimeError"],
)
def test_fp8_with_transformer_engine_that_cannot_be_imported_says_so(tmp_path, monkeypatch, error):
    """TE installed but failing at import (a missing shared library, its version check, CUDA) exits naming the
    exception and the setup that installs TE, as a missing TE does."""
    (tmp_path / "transformer_engine").mkdir()
    (tmp_path / "transformer_engine" / "__init__.py").write_text(f"raise {error}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.split(".")[0] == "transformer_engine"]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(SystemExit) as exited:
        mpt.require_fp8()
    message = str(exited.value)
    assert message.startswith("error: --precision amp_fp8 needs NVIDIA Transformer Engine")
    assert f"failed: {error.split('(')[0]}: " in message and "MAYA_WITH_TE=1 scripts/setup" in message


@pytest.mark.slow
@pytest.mark.parametrize("mode, reduce_dtype, attn_impl", [("DEFAULT", "fp32", "flash"), ("PURE", "bf16", "triton")])
@pytest.mark.e2e
def test_emulated_fsdp_run(tmp_path, mode, reduce_dtype, attn_impl):
    """Two virtual H100s, a 2-block MPT: bf16 all-gathers, reduce-scatters in the MP mode's dtype, one
    all-gather per unit per forward and backward, cuDNN attention, the optimizer's step read-backs."""
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app,
        [
            "emulate",
            "--nproc-per-node",
            "2",
            "--out",
            str(out),
            "--",
            "python",
            str(WORKLOADS / "mpt.py"),
            "--model",
            "125m",
            "--layers",
            "2",
            "--seq-len",
            "128",
            "--micro-batch",
            "2",
            "--grad-accum",
            "2",
            "--mp-mode",
            mode,
            "--attn-impl",
            attn_impl,
            "--activation-checkpointing",
            "--steps",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    run = Run(out)
    calls = run.table("api_calls").filter(pc.equal(pc.field("rank"), 0)).to_pylist()
    colls = [c for c in calls if c["collective_name"]]
    block = mpt.MPTConfig.of("125m", 128).num_params() - (50368 + 128 + 2) * 768  # 12 blocks' parameters
    shard = block // 12 // 2
    gathers = [c for c in colls if c["collective_name"] == "allgather" and c["in_msg_nelems"] == shard]
    scatters = [c for c in colls if c["collective_name"] == "reducescatter" and c["out_msg_nelems"] == shard]
    assert {c["comm_dtype"] for c in gathers} == {"bf16"} and {c["comm_dtype"] for c in scatters} == {reduce_dtype}
    # 2 blocks x 2 micro-batches x 2 steps: one gather in forward, one in backward (the recompute reuses it)
    assert len(gathers) == 2 * len(scatters) == 16
    kernels = {k["kernel_id"]: k for k in run.table("kernels").to_pylist()}
    attention = [
        json.loads(c["args"])["attention"]
        for c in calls
        if c["kernel_id"] in kernels and kernels[c["kernel_id"]]["family"] == "attention"
    ]
    assert {(a["seq_q"], a["head_dim"], a["causal"]) for a in attention} == {(128, 64, True)}
    assert sum(a["backward"] for a in attention) == 2 * 2 * 2  # blocks x micro-batches x steps
    p = CliRunner().invoke(app, ["predict", str(out), "--json"])
    assert p.exit_code == 0, p.output
    assert json.loads(p.output)["steady_iterations"] == 1


@pytest.mark.e2e
@pytest.mark.slow
def test_fp8_under_the_emulator_fails_with_the_reason(tmp_path):
    """The script's `sys.exit(message)` reaches the user through `maya emulate`."""
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed here")
    r = CliRunner().invoke(
        app,
        [
            "emulate",
            "--out",
            str(tmp_path / "run"),
            "--",
            "python",
            str(WORKLOADS / "mpt.py"),
            "--model",
            "125m",
            "--layers",
            "1",
            "--seq-len",
            "64",
            "--micro-batch",
            "1",
            "--grad-accum",
            "1",
            "--precision",
            "amp_fp8",
        ],
    )
    assert r.exit_code != 0
    assert "needs NVIDIA Transformer Engine" in r.output


@pytest.mark.parametrize("chunk_bytes", [1 << 28, 3 * 37 * 4])
def test_fused_cross_entropy_is_torchs_value_and_gradient(monkeypatch, chunk_bytes):
    """flash-attn's fused loss: the mean over scored tokens, ignored targets contributing nothing, whether the
    logits are taken whole or in row chunks."""
    monkeypatch.setattr(mpt, "CE_CHUNK_BYTES", chunk_bytes)
    torch.manual_seed(0)
    logits = torch.randn(10, 37, requires_grad=True)
    target = torch.randint(0, 37, (10,))
    target[[3, 9]] = mpt.IGNORE_INDEX
    fused = mpt.cross_entropy(logits, target, "fused_crossentropy")
    (fused_grad,) = torch.autograd.grad(fused, logits)
    ref = torch.nn.functional.cross_entropy(logits, target, ignore_index=mpt.IGNORE_INDEX)
    (ref_grad,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(fused, ref)
    torch.testing.assert_close(fused_grad, ref_grad)
    assert not fused_grad[[3, 9]].any()


@pytest.mark.parametrize("loss_fn, extra", [("fused_crossentropy", 0), ("torch_crossentropy", 1)])
def test_only_torchs_cross_entropy_keeps_log_probabilities(loss_fn, extra):
    """What the loss saves for backward beyond the logits: nothing logits-sized for the fused kernel (as
    flash-attn's: the logits, the targets, per-token numbers), the log-probabilities for torch's."""
    logits = torch.randn(16, 50, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 50, (16,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        mpt.cross_entropy(logits, target, loss_fn)
    big = {t.data_ptr() for t in saved if t.numel() == logits.numel()} - {logits.data_ptr()}
    assert len(big) == extra


@pytest.mark.slow
@pytest.mark.e2e
def test_emulated_step_allocates_the_logits_and_their_gradient_once(tmp_path):
    """On a virtual A100 the first step's device allocations of a logits' size (N x V bf16; the caching
    allocator reuses them later): two with the fused loss (the logits, their gradient), four with torch's
    (also the log-probabilities and their gradient). The two that let the published 350m/760m `bf16` rows
    with large micro-batches fit a 40 GB A100 (docs/mpt_mechanisms.md, section 8)."""
    from maya.emulator.launcher import emulate

    logits = 8 * 512 * 50368 * 2
    blocks = {}
    for loss_fn in mpt.LOSS_FNS:
        out = tmp_path / loss_fn
        result = emulate(
            [
                str(WORKLOADS / "mpt.py"),
                "--model",
                "125m",
                "--layers",
                "1",
                "--seq-len",
                "512",
                "--micro-batch",
                "8",
                "--grad-accum",
                "2",
                "--precision",
                "bf16",
                "--mp-mode",
                "PURE",
                "--no-use-orig-params",
                "--no-train-metrics",
                "--loss-fn",
                loss_fn,
                "--steps",
                "2",
            ],
            out,
            hardware="a100-sxm-40gb",
        )
        assert result.status == "complete", result
        run = Run(out)
        first_step = {o["op_id"] for o in run.table("ops").to_pylist() if o["iteration"] == 0}
        blocks[loss_fn] = sorted(
            e["bytes"] // logits
            for e in run.table("memory_events").to_pylist()
            if e["kind"] == "alloc" and e["space"] == "device" and e["op_id"] in first_step and e["bytes"] >= logits
        )
    assert blocks == {"fused_crossentropy": [1, 1], "torch_crossentropy": [1, 1, 1, 1]}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(
    not transformer_engine.installed(),
    reason="Transformer Engine is not installed (MAYA_WITH_TE=1 scripts/setup installs it)",
)
@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-checkpointing", "checkpointing"])
def test_an_fp8_row_of_the_shipped_layout_validates_on_fp8_gemms(tmp_path, checkpointing):
    """An `amp_fp8` row (125m, sequence 512, one virtual H100) through the suite's machinery: its 4 projections a
    layer are TE's cuBLASLt GEMMs, E4M3 operands forward and E4M3 x E5M2 in the backward (HYBRID), 3 a projection a
    step; with activation checkpointing each block's recompute runs its forward GEMMs again in fp8 (TE's checkpoint:
    the recompute under the forward's recipe); the tied unembedding stays a bf16 GEMM; TE's casts are sized and
    priced; MFU is of the fp8 peak."""
    row = {**ROWS[20], "Model": "125m", "SeqLen (T)": "512", "# GPUs": "1", "MicroBatchSize": "2"}
    row.update({"GradAccum": "1", "GlobalBatchSize": "2", "Precision": "amp_fp8"})
    row["Activation Checkpointing"] = str(checkpointing)
    path = tmp_path / "fp8.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    warehouse = tmp_path / "warehouse.duckdb"
    Registry(warehouse).register(KernelEstimator(), data_hash="stub", config_hash="stub", metrics={})
    suite = load_suite(str(path))
    (result,) = run_suite(suite, suite.table, warehouse=warehouse).results
    assert result.status == "ok", result.reason
    assert result.predicted_s > 0 and result.details["mfu_dtype"] == "fp8"
    per_pass = 12 * 4 * llm_foundry.STEPS  # layers x projections x steps
    forwards = per_pass * (2 if checkpointing else 1)  # the recompute runs each block's forward again
    casts = 2 * forwards + per_pass  # input and weight per forward GEMM, the output's gradient per backward
    assert f"fp8 casts as torch's cast ({casts})" in " ".join(result.details["notes"])
    calls = Run(traces_dir() / result.command_hash).table("api_calls").to_pylist()
    gemms = Counter((c["api"], c["gemm_dtype_a"], c["gemm_dtype_b"]) for c in calls if c["gemm_m"] is not None)
    assert gemms == {
        ("cublasLtMatmul", "fp8e4m3", "fp8e4m3"): forwards,
        ("cublasLtMatmul", "fp8e4m3", "fp8e5m2"): 2 * per_pass,  # dgrad and wgrad
        ("cublasGemmEx", "bf16", "bf16"): 3 * llm_foundry.STEPS,
    }
