"""Megatron-LM's own `pretrain_gpt.py`, unchanged, with its default `--transformer-impl transformer_engine`: a 4-layer
GPT with TP 2 on 2 GPUs, bf16, mock data, its layers Transformer Engine's (`TELayerNormColumnParallelLinear`,
`TERowParallelLinear`, TE's fused attention), predicted with TE's own kernels sized by their TE calls.

Needs what `test_megatron_lm.py` needs (MAYA_MEGATRON_LM, Python 3.12) and Transformer Engine built for Python 3.12
(`PYTHON=python3.12 MAYA_WITH_TE=1 scripts/setup`); it skips otherwise."""

import pytest

from maya.simulator.trace import load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY_GPT_TE = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --num-layers 4 --hidden-size 256 "
    "--num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 "
    "--global-batch-size 16 --train-iters 3 --lr 1e-4 --bf16 --no-gradient-accumulation-fusion --eval-iters 0 "
    "--eval-interval 1000 --tensor-model-parallel-size 2"
).split()
"""The flags beyond Megatron's defaults: without apex, `--no-gradient-accumulation-fusion`; nothing else."""


def test_pretrain_gpt_with_transformer_engine_tp2(tmp_path, emulate_and_predict, monkeypatch, megatron_checkout_te):
    checkout = megatron_checkout_te
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
    out = tmp_path / "run"
    _, p = emulate_and_predict(
        out,
        ["torchrun", "--nproc_per_node=2", "pretrain_gpt.py", *TINY_GPT_TE],
        "--nproc-per-node",
        "2",
        "--iterations",
        "3",
        cwd=checkout,
    )
    assert p["world_size"] == 2 and p["steady_iterations"] >= 1 and p["mfu"] > 0
    assert not [n for n in p["notes"] if "routing was assumed" in n or "have no sizes" in n]
    assert any(n.startswith("Transformer Engine's own kernels") for n in p["notes"])
    ops = load(out).ranks[0].ops
    assert {"te::layernorm_fwd", "te::generic_gemm"} <= set(ops["name"])  # TE's layers ran, not Megatron's local ones
