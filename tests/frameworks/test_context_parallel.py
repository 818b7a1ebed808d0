"""Context parallelism unchanged under `maya emulate`: torchtitan 0.3.0's (`--parallelism.context_parallel_degree`:
its Llama 3 runs FlexAttention, each rank's query shard against keys and values all-gathered over the CP group)
and PyTorch's own ring attention over SDPA (`torch.distributed.tensor.experimental.context_parallel`, in
`tests/workloads/ring_attention.py`), with both of torch's rotate methods."""

import json

import pytest
from framework_assets import torchtitan_assets
from paths import WORKLOADS

from maya.api.analysis import open_run
from maya.simulator.triton_work import causal_blocks, describe

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEQ, BLOCK = 2048, 128
"""torchtitan's debug model: 2,048-token sequences, FlexAttention's 128-token blocks."""


def flex_launches(run, rank: int):
    """The flex-attention template launches of `rank` in training steps: (kernel name, args text) per launch."""
    return open_run(run).sql(
        "SELECT k.name, a.args FROM api_calls a JOIN kernels k USING (rank, kernel_id) "
        f"WHERE a.rank = {rank} AND k.name LIKE 'triton_tem_fused_flex_attention%'"
    )


def test_torchtitan_context_parallel_prices_each_rank_at_its_share_of_the_mask(tmp_path, emulate_and_predict):
    """CP 2 on 2 GPUs with torchtitan's head-tail load balancing: each rank's flex launches take its 1,024 queries
    against all 2,048 keys, and are priced at half the sequence's causal blocks (68 of 136 per batch and head, what
    each balanced rank computes), not as a 1,024-token sequence (36)."""
    pytest.importorskip("torchtitan")
    root = torchtitan_assets(tmp_path / "titan")
    argv = ["python", "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel"]
    argv += ["--parallelism.context_parallel_degree", "2"]
    output, prediction = emulate_and_predict(
        tmp_path / "run", argv, "--nproc-per-node", "2", "--iterations", "2", cwd=root
    )
    assert "stopped after 2 training iterations" in output
    launches = flex_launches(tmp_path / "run", 0)
    assert len(launches) > 0
    for name, args in launches.itertuples(index=False):
        shapes = {a["name"]: a.get("shape") for a in json.loads(args)["triton"]["args"]}
        assert shapes["arg_LSE"][-1] == SEQ // 2 and shapes["arg_K"][2] == SEQ  # a shard's queries, every key
        work = describe(name, args)
        assert work["mask"] == "causal stand-in"  # compiled create_block_mask: values only a GPU computes
        assert work["m"] * work["n"] == pytest.approx(causal_blocks(SEQ, SEQ, BLOCK, BLOCK) / 2 * BLOCK * BLOCK)
    calls = open_run(tmp_path / "run").calls([0])
    assert (calls["api"] == "ncclAllGather").any() and not (calls["api"] == "ncclSend").any()  # gathered, no ring
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0 and prediction["mfu"] > 0


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_torch_ring_attention_records_each_ring_steps_attention(tmp_path, emulate_and_predict, rotate):
    """PyTorch's ring attention on 2 GPUs, load balanced: each rank's first ring step is causal attention over its
    own 2 chunks, the second full attention of half its queries (rank 0) or half the keys (rank 1); the two ring
    positions are two classes, each captured; the replay's exchanges meet (no deadlock)."""
    seq = 1024
    argv = ["python", str(WORKLOADS / "ring_attention.py"), "--rotate", rotate, "--steps", "4"]
    argv += ["--seq", str(seq), "--dim", "256", "--heads", "2", "--layers", "2", "--vocab", "1024"]
    output, prediction = emulate_and_predict(tmp_path / "run", argv, "--nproc-per-node", "2", "--iterations", "2")
    assert "2 class(es) of equivalent ranks among 2" in output
    run = open_run(tmp_path / "run")
    shard, half = seq // 2, seq // 4
    expected = {0: {(shard, shard, True), (half, shard, False)}, 1: {(shard, shard, True), (shard, half, False)}}
    for rank in (0, 1):
        calls = run.calls([rank])
        graphs = [json.loads(a)["attention"] for a in calls["args"].dropna() if '"attention"' in a]
        forward = {(g["seq_q"], g["seq_kv"], g["causal"]) for g in graphs if not g["backward"]}
        assert forward == expected[rank]
        apis = set(calls["api"])
        assert "ncclSend" in apis  # the backward's gradients go round by all-to-all, whatever the method
        assert ("ncclAllGather" in apis) == (rotate == "allgather")
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0 and prediction["mfu"] > 0
