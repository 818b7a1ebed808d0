"""Hugging Face TRL's own entry point (`trl sft`, with PEFT and bitsandbytes from PyPI), unchanged, as its users run
QLoRA: `maya emulate -- trl sft --use_peft --load_in_4bit ...` on one virtual H100, a Llama made from a config and a
local JSON-lines dataset. TRL's CLI is read as the `accelerate launch` of its script (one rank); bitsandbytes loads its
own CUDA library and launches its kernels through the runtime."""

import json
import os
import random
import sys
from pathlib import Path

import pytest
from framework_assets import WORDS, write_tokenizer

for package in ("trl", "peft", "bitsandbytes"):
    pytest.importorskip(package)
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INTERMEDIATE, RANK = 768, 16
TOKENS_OVER = 2048
"""The batch's tokens (8 x 512, less the shift) exceed this, and every width and the vocabulary are below it."""


def sft_assets(root: Path) -> Path:
    """`root/model` (a 2-layer Llama of width 256, random weights, and a byte-level BPE) and `root/data/train.jsonl`."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(0)
    (root / "data").mkdir(parents=True)
    lines = (json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(600))}) for _ in range(64))
    (root / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")
    write_tokenizer(root / "model", root / "data" / "train.jsonl", vocab_size=1000)
    tok = PreTrainedTokenizerFast.from_pretrained(root / "model")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root


def test_trl_sft_qlora_runs_bitsandbytes_kernels(tmp_path, monkeypatch, emulate_and_predict):
    from maya_trace_spec import Run

    root = sft_assets(tmp_path / "sft")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # its console script
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        ["trl", "sft", "--model_name_or_path", "model", "--dataset_name", "data", "--max_steps", "5"]
        + ["--per_device_train_batch_size", "8", "--max_length", "512", "--bf16", "true", "--dtype", "bfloat16"]
        + ["--report_to", "none", "--save_strategy", "no", "--output_dir", "out"]
        + ["--use_peft", "--lora_r", str(RANK), "--load_in_4bit"],
        "--iterations",
        "3",
        cwd=root,
    )
    assert "stopped after 3 training iterations" in output
    assert "bitsandbytes library load error" not in output  # its library loaded on the stubs
    run = Run(tmp_path / "run")
    kernels = run.table("kernels").to_pandas()
    assert kernels.name.str.contains("kDequantizeBlockwise").any()  # bitsandbytes' own kernel, launched
    ops = run.table("ops").to_pandas()
    assert {"bitsandbytes::gemm_4bit", "bitsandbytes::dequantize_4bit"} <= set(ops.name)
    calls = run.table("api_calls").to_pandas().merge(ops[["op_id", "phase"]], on="op_id")
    weight_grads = calls[(calls.phase == "backward") & (calls.gemm_k > TOKENS_OVER)]  # k: the batch's tokens
    assert len(weight_grads) and (weight_grads[["gemm_m", "gemm_n"]] == RANK).any(axis=1).all()  # LoRA's alone
    assert prediction["steady_iterations"] == 2
