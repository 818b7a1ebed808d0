"""Megatron-LM's own `pretrain_gpt.py`, unchanged, with Megatron's flags: TP 2 x PP 2 x DP 2 on 8 GPUs with mock
data, deduplicated (one captured rank per pipeline stage), predicted without deadlock, unimplemented API or
routing note, its pipeline bubble as waiting for peers.

Megatron-LM is a repository, not a package, and megatron-core 0.17 and later need Python 3.12: set
MAYA_MEGATRON_LM to a checkout (tested at its `core_r0.19.0` branch) in an environment with megatron-core and
pybind11 to run this test; it skips otherwise."""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY_GPT = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --transformer-impl local --num-layers 4 "
    "--hidden-size 256 --num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 "
    "--global-batch-size 16 --train-iters 3 --lr 1e-4 --bf16 --no-gradient-accumulation-fusion "
    "--no-persist-layer-norm --no-masked-softmax-fusion --eval-iters 0 --eval-interval 1000"
).split()


def test_pretrain_gpt_tp2_pp2_dp2(tmp_path, emulate_and_predict, monkeypatch, megatron_checkout):
    checkout = megatron_checkout
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
    argv = ["torchrun", "--nproc_per_node=8", "pretrain_gpt.py", *TINY_GPT]
    argv += ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
    _, p = emulate_and_predict(
        tmp_path / "run",
        argv,
        "--nproc-per-node",
        "8",
        "--hardware",
        "a100-sxm-80gb",
        "--iterations",
        "3",
        cwd=checkout,
    )
    assert p["world_size"] == 8 and p["captured_ranks"] == 2 and p["steady_iterations"] >= 1
    assert not [n for n in p["notes"] if "routing was assumed" in n]
    assert p["hfu"] == pytest.approx(p["mfu"]) and p["mfu"] > 0  # no recomputation
    for rank in p["ranks"]:  # each stage waits for the other in the 1F1B schedule's fill and drain
        assert rank["peer_wait_ns"] > 0 and rank["compute_ns"] > 0, rank
