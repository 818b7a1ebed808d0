"""torchtune's recipes as its README runs them, unchanged: `maya emulate -- tune run RECIPE --config CONFIG
key=value ...` with a shipped config and command-line overrides for local assets (a tiny Llama 3.2 in Hugging Face
format, a tiktoken-format tokenizer of the 256 bytes, an alpaca-style JSON file): no Hub. `tune run` is read by
torchtune's CLI, as its recipe in one process or torchrun's launch of it."""

import base64
import json
import random
from pathlib import Path

import pytest
from framework_assets import WORDS

pytest.importorskip("torchtune")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LAYERS, WIDTH = 2, 128
SIZES = {"vocab_size": 128256, "num_layers": LAYERS, "num_heads": 4, "num_kv_heads": 2, "embed_dim": WIDTH}
"""The model's sizes (the Llama 3 tokenizer's special tokens are ids 128000-128255, so the full vocabulary)."""


def assets(root: Path) -> list[str]:
    """A tiny Llama 3.2 checkpoint, its tokenizer and an alpaca JSON under `root`; the overrides naming them."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=SIZES["vocab_size"],
        hidden_size=WIDTH,
        intermediate_size=4 * WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=SIZES["num_heads"],
        num_key_value_heads=SIZES["num_kv_heads"],
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(root / "model")
    (root / "model" / "tokenizer.model").write_text(
        "".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256))
    )
    rng = random.Random(0)
    rows = [
        {"instruction": " ".join(rng.choices(WORDS, k=30)), "input": "", "output": " ".join(rng.choices(WORDS, k=60))}
        for _ in range(64)
    ]
    (root / "alpaca.json").write_text(json.dumps(rows))
    return [
        f"output_dir={root / 'out'}",
        f"tokenizer.path={root / 'model' / 'tokenizer.model'}",
        "tokenizer.max_seq_len=256",
        f"checkpointer.checkpoint_dir={root / 'model'}",
        "dataset._component_=torchtune.datasets.alpaca_dataset",
        "dataset.source=json",
        f"dataset.data_files={root / 'alpaca.json'}",
        "dataset.split=train",
        "optimizer._component_=torch.optim.AdamW",  # not bitsandbytes' PagedAdamW8bit, which the config names
        *(f"model.{k}={v}" for k, v in SIZES.items()),
        "model.max_seq_len=2048",
    ]


def test_a_full_finetune_steps_its_optimizers_in_the_backward(tmp_path, emulate_and_predict):
    """`full_finetune_single_device` with its config's `optimizer_in_bwd: True`: an optimizer per parameter, stepped
    inside the backward, ends one iteration per backward; its peak allocated outlives the recipe's reset of the
    statistics after each logged step."""
    from maya_trace_spec import Run

    overrides = assets(tmp_path)
    model = "model._component_=torchtune.models.llama3_2.llama3_2"
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        ["tune", "run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device", model] + overrides,
        "--iterations",
        "3",
        cwd=tmp_path,
    )
    assert "stopped after 3 training iterations" in output
    ops = Run(tmp_path / "run").table("ops").to_pandas()
    steps = ops[ops["name"].str.startswith("Optimizer.step#")]
    parameters = 2 + 9 * LAYERS  # embedding, final norm; per layer 7 projections and 2 norms (output tied)
    assert steps.groupby("iteration").size().tolist() == [parameters] * 3
    assert prediction["steady_iterations"] == 2
    logits = 4 * 256 * SIZES["vocab_size"] * 2  # the batch's bf16 logits (4 sequences cut at 256 tokens)
    assert prediction["peak_allocated_bytes"] > logits  # the loss's peak, not the last logged step's (the weights)


def test_lora_and_distributed_recipes(tmp_path, emulate_and_predict):
    """`lora_finetune_single_device` (one rank) and `tune run --nproc_per_node 2 full_finetune_distributed` (two
    ranks of FSDP2, torchrun's launch read by torchtune's CLI) run complete."""
    from maya_trace_spec import Run

    overrides = assets(tmp_path)
    lora = "model._component_=torchtune.models.llama3_2.lora_llama3_2"
    output, prediction = emulate_and_predict(
        tmp_path / "lora",
        ["tune", "run", "lora_finetune_single_device", "--config", "llama3_2/1B_lora_single_device", lora]
        + ["model.lora_rank=8", "model.lora_alpha=16", "gradient_accumulation_steps=2"]
        + overrides,
        "--iterations",
        "2",
        cwd=tmp_path,
    )
    assert "stopped after 2 training iterations" in output and prediction["steady_iterations"] == 1
    full = "model._component_=torchtune.models.llama3_2.llama3_2"
    output, prediction = emulate_and_predict(
        tmp_path / "dist",
        ["tune", "run", "--nproc_per_node", "2", "full_finetune_distributed", "--config", "llama3_2/1B_full", full]
        + ["gradient_accumulation_steps=1", *overrides],
        "--iterations",
        "2",
        cwd=tmp_path,
    )
    run = Run(tmp_path / "dist")
    assert json.loads(run.info["attrs"])["launch"]["command"][:2] == ["tune", "run"]
    calls = run.table("api_calls").to_pandas()
    assert sorted(calls["rank"].unique()) == [0, 1]
    assert calls["api"].str.startswith("nccl").any()
