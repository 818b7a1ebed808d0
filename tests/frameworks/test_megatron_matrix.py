"""Megatron-LM's own `pretrain_gpt.py`, unchanged, with Transformer Engine, beyond TP/PP/DP: context parallelism, a
mixture of experts with expert parallelism (Megatron's all-gather token dispatcher, and its all-to-all one with
grouped GEMMs, with two local experts and with one, whose 8-byte token count every layer copies to the host), a
Llama-style model, fp16 with loss scaling and fp8 with current scaling; each a 4-layer GPT of width 256 on 2 GPUs
with mock data, emulated and predicted with no unimplemented API, its communication on the right groups and the
routing note only where a router chose. The all-to-all configs are also priced by the NCCL model of a DGX H100 (the
send of each rank's own share laid out on one GPU and priced as a copy).

Needs what `test_megatron_te.py` needs (MAYA_MEGATRON_LM, Python 3.12, Transformer Engine); it skips otherwise."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.simulator import CollectiveDurations, RooflineDurations, simulate
from maya.simulator.trace import load
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

COMMON = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --num-layers 4 --hidden-size 256 "
    "--num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 "
    "--global-batch-size 16 --train-iters 3 --lr 1e-4 --no-gradient-accumulation-fusion --eval-iters 0 "
    "--eval-interval 1000"
).split()
MOE = "--num-experts 4 --expert-model-parallel-size 2 --moe-router-topk 2 --swiglu --disable-bias-linear".split()
"""Megatron's MoE MLP needs SwiGLU without biases (its weighted activation fusion: `Only support fusion of swiglu and
quick_gelu with per_token_scale`, then `Bias is not supported for weighted swiglu fusion`)."""
LLAMA = (
    "--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention --num-query-groups 2 "
    "--untie-embeddings-and-output-weights --disable-bias-linear"
).split()
CONFIGS = {
    "cp2": ["--bf16", "--context-parallel-size", "2"],
    "moe_ep2": ["--bf16", *MOE],
    "moe_alltoall_ep2": ["--bf16", *MOE, "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm"],
    "moe_one_expert_ep2": ["--bf16", *MOE[2:], "--num-experts", "2", "--moe-token-dispatcher-type", "alltoall"],
    "llama_tp2": ["--bf16", "--tensor-model-parallel-size", "2", *LLAMA],
    "fp16_tp2": ["--fp16", "--tensor-model-parallel-size", "2"],
    "fp8_tensorwise_tp2": ["--bf16", "--tensor-model-parallel-size", "2", "--fp8-format", "hybrid"]
    + ["--fp8-recipe", "tensorwise"],
}


def communication(run: Path) -> pd.DataFrame:
    """Rank 0's NCCL calls with the size of the group each ran on."""
    trace = load(run).ranks[0]
    calls = trace.calls
    nccl = calls[calls["comm_id"].notna() & ~calls["api"].isin(["ncclGroupStart", "ncclGroupEnd"])]
    groups = pd.read_parquet(run / "communicators")
    sizes = dict(zip(groups["comm_id"], groups["comm_size"]))
    return nccl.assign(group_size=nccl["comm_id"].map(sizes))


def self_sends_priced(run: Path) -> None:
    """The all-to-alls priced by the NCCL model of a DGX H100 (which refused a send/recv from a GPU to itself): the
    rank's own share (one GPU) costs the copy NCCL makes of it, the others a transfer."""
    h100 = hardware.get("h100-sxm")
    sim = simulate(load(run), h100, CollectiveDurations("dgx-h100"))
    index = next(i for i, rep in enumerate(sim.replicas) if rep.rank == 0)
    frame = sim.replicas[index].program.frame
    p2p = frame["collective_name"].isin(["send", "recv"]).to_numpy()
    own = p2p & (frame["comm_size"] == 1).to_numpy()
    shares = frame["comm_bytes"].to_numpy(dtype="float64")
    device = np.asarray(sim.devices[index])
    assert (own & (shares > 0)).any() and (p2p & ~own).any()
    copy_ns = RooflineDurations().self_copy_ns(shares[own], h100)
    assert device[own] == pytest.approx(copy_ns, abs=1)  # whole nanoseconds
    assert (device[p2p & ~own] > 0).all()


@pytest.mark.parametrize("config", CONFIGS)
def test_pretrain_gpt_beyond_tp_pp_dp(tmp_path, emulate_and_predict, monkeypatch, config, megatron_checkout_te):
    checkout = megatron_checkout_te
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
    out = tmp_path / "run"
    argv = ["torchrun", "--nproc_per_node=2", "pretrain_gpt.py", *COMMON, *CONFIGS[config]]
    _, p = emulate_and_predict(out, argv, "--nproc-per-node", "2", "--iterations", "3", cwd=checkout)
    assert p["world_size"] == 2 and p["steady_iterations"] >= 1 and p["mfu"] > 0
    assert not [n for n in p["notes"] if "have no sizes" in n]
    routed = [n for n in p["notes"] if "routing was assumed" in n]
    assert bool(routed) == config.startswith("moe"), p["notes"]  # a router's top-k, and nothing else
    nccl = communication(out)
    ops = load(out).ranks[0].ops
    names = set(ops["name"].astype(str))
    if config == "cp2":  # TE's ring attention: K and V passed around the 2-rank CP group
        ring = nccl[nccl["api"].isin(["ncclSend", "ncclRecv"])]
        assert len(ring) and (ring["group_size"] == 2).all()
    elif config == "moe_ep2":  # the all-gather dispatcher: tokens gathered and reduce-scattered over the EP group
        for api in ("ncclAllGather", "ncclReduceScatter"):
            assert (nccl.loc[nccl["api"] == api, "group_size"] == 2).sum() >= 4 * 3, api  # every layer and step
        assert "aten::topk" in names
    elif config.startswith("moe_"):  # all-to-alls over the EP group: a send and a recv to each member, itself too
        a2a = nccl[nccl["api"].isin(["ncclSend", "ncclRecv"])]
        assert len(a2a) and (a2a["group_size"] == 2).all() and set(a2a["peer_rank"]) == {0, 1}
        self_sends_priced(out)
        if config == "moe_alltoall_ep2":
            assert "te::te_general_grouped_gemm" in names
        else:  # the one local expert's token count, copied to the host every layer: read as computed, never flipped
            reads = [
                c
                for c in Run(out).table("api_calls").to_pylist()
                if c["memcpy_kind"] == "DtoH" and c["bytes"] == 8 and c["data_dependent"]
            ]
            stand_ins = {json.loads(c["args"])["stand_in"] for c in reads if c["args"]}
            assert len(reads) >= 4 * 3 and not stand_ins & {"zero", "one"}, stand_ins
    elif config == "llama_tp2":
        assert {"te::rmsnorm_fwd", "te::fused_rope_forward"} <= names
    elif config == "fp16_tp2":  # loss scaling: every step unscales and steps (a stand-in found no Inf)
        assert p["mfu_dtype"] == "fp16"
        steps = ops.drop_duplicates("op_id")
        unscaled = steps[steps["name"] == "aten::_amp_foreach_non_finite_check_and_unscale_"]["iteration"]
        adam = steps[steps["name"] == "te::multi_tensor_adam"]["iteration"]
        assert set(unscaled) == set(adam) == {0, 1, 2}
    else:  # current scaling: each cast computes its own scale from its amax, no delayed history update
        kernels = set(load(out).ranks[0].kernels["name"].astype(str))
        assert any("compute_scale_from_amax" in k for k in kernels)
        assert not any("amax_and_scale_update" in k for k in kernels)
        gemms = load(out).ranks[0].calls["gemm_dtype_a"].dropna().astype(str)
        assert gemms.str.contains("e4m3", case=False).any()
