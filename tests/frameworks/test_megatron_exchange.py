"""Megatron-LM's `pretrain_gpt.py` on the korthikanti2022 rows' patched copy (`validation.megatron_exchange`): TP 2 x
PP 2 on 4 GPUs, fp16 with Transformer Engine as the suite runs it, 1F1B and interleaved. It trains, each stage sends
and receives 1/TP of the activation, and each receive is followed by an all-gather in the tensor-parallel group.

Needs MAYA_MEGATRON_LM (a core_r0.19.0 checkout), Python 3.12 and Transformer Engine; it skips otherwise."""

import pytest

from maya.simulator.trace import load
from maya.validation import megatron_exchange

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY_GPT = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --num-layers 4 --hidden-size 256 "
    "--num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 "
    "--global-batch-size 16 --train-iters 3 --lr 1e-4 --fp16 --no-gradient-accumulation-fusion --eval-iters 0 "
    "--eval-interval 1000 --log-interval 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
).split()
ACTIVATION = 256 * 2 * 256
"""Elements of one stage's activation: sequence x micro-batch x hidden."""


@pytest.mark.parametrize("schedule", [[], ["--num-layers-per-virtual-pipeline-stage", "1"]], ids=["1f1b", "vp"])
def test_stages_exchange_one_tp_share_and_gather_it(
    schedule, tmp_path, emulate_and_predict, monkeypatch, megatron_checkout_te
):
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
    copy = megatron_exchange.patched(megatron_checkout_te)
    out = tmp_path / "run"
    _, p = emulate_and_predict(
        out,
        ["torchrun", "--nproc_per_node=4", "pretrain_gpt.py", *TINY_GPT, *schedule],
        "--nproc-per-node",
        "4",
        "--iterations",
        "3",
        "--hardware",
        "a100-sxm-80gb",
        "--no-dedup",  # every rank captured: rank 3, the last stage's second TP rank, is the one that logs the loss
        cwd=copy,
    )
    assert p["world_size"] == 4 and p["steady_iterations"] >= 1 and p["mfu"] > 0
    assert "lm loss" in (out / "logs" / "rank3.txt").read_text()  # the last stage trained and reported its loss
    trace = load(out)
    for rank in trace.ranks.values():
        nccl = rank.calls[rank.calls["domain"] == "nccl"]
        nccl = nccl[~nccl["api"].isin(["ncclGroupStart", "ncclGroupEnd"])].reset_index(drop=True)
        sends, recvs = nccl[nccl["api"] == "ncclSend"], nccl[nccl["api"] == "ncclRecv"]
        assert len(sends) and set(sends["in_msg_nelems"]) == {ACTIVATION // 2}
        assert len(recvs) == len(sends) and set(recvs["out_msg_nelems"]) == {ACTIVATION // 2}
        tp = rank.communicators.set_index("comm_id")["ranks"].map(len)
        gathers = nccl[(nccl["api"] == "ncclAllGather") & (nccl["out_msg_nelems"] == ACTIVATION)]
        assert len(gathers) == len(recvs) and set(tp[gathers["comm_id"]]) == {2}
        if not schedule:  # 1F1B waits on each receive at once: its gather follows it
            assert set(nccl["api"].shift(-1)[recvs.index]) == {"ncclAllGather"}
