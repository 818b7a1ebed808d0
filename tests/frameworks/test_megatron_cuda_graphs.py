"""Megatron-LM's own `pretrain_gpt.py`, unchanged, with its CUDA graphs (`--cuda-graph-impl local`: each transformer
layer's forward and backward captured after the first iteration; `full_iteration`: the whole forward-backward;
`transformer_engine`: TE's layers graphed by TE's `make_graphed_callables`), TP 2 on 2 GPUs: the replayed layers' GEMMs and tensor-parallel all-reduces are in the trace with their shapes and priced,
and the step is predicted faster than the same step run eagerly, with a smaller host-bound share. And Megatron's
`--tp-comm-overlap` (Transformer Engine's userbuffers), which virtual GPUs cannot run, fails loudly, naming the API
and the flag.

Needs what `test_megatron_lm.py` needs (MAYA_MEGATRON_LM, Python 3.12); the TE graphs and the userbuffers test
also Transformer Engine. It skips otherwise."""

from collections import Counter

import pytest
from typer.testing import CliRunner

from maya.cli.app import app
from maya.simulator.trace import load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ITERATIONS = 4
TINY_GPT_TP2 = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --num-layers 4 --hidden-size 256 "
    "--num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 "
    f"--global-batch-size 16 --train-iters {ITERATIONS} --lr 1e-4 --bf16 --no-gradient-accumulation-fusion "
    "--eval-iters 0 --eval-interval 1000 --tensor-model-parallel-size 2"
).split()
LOCAL = "--transformer-impl local --no-persist-layer-norm --no-masked-softmax-fusion".split()
GRAPHS = {  # (the layers' implementation, the graphs' flags)
    "local": ("local", ["--cuda-graph-impl", "local"]),
    "full_iteration": (
        "local",
        "--cuda-graph-impl full_iteration --cuda-graph-warmup-steps 1 --no-check-for-nan-in-loss-and-grad".split(),
    ),
    "transformer_engine": ("te", "--cuda-graph-impl transformer_engine --cuda-graph-warmup-steps 1".split()),
}
LAYERS = {"local": LOCAL, "te": []}
_predicted: dict[str, tuple] = {}


def _run(name, flags, tmp_path_factory, emulate_and_predict, monkeypatch, checkout):
    """(prediction, rank 0's calls) of the 2-GPU run with `flags`, emulated once per session."""
    if name not in _predicted:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
        out = tmp_path_factory.mktemp(name) / "run"
        argv = ["torchrun", "--nproc_per_node=2", "pretrain_gpt.py", *TINY_GPT_TP2, *flags]
        _, p = emulate_and_predict(out, argv, "--nproc-per-node", "2", "--iterations", str(ITERATIONS), cwd=checkout)
        _predicted[name] = p, load(out).ranks[0].calls
    return _predicted[name]


def _gemms(calls) -> Counter:
    """The GEMMs' (m, n, k) among `calls`, counted."""
    gemms = calls[calls["gemm_m"].notna()]
    return Counter(zip(gemms["gemm_m"], gemms["gemm_n"], gemms["gemm_k"]))


@pytest.mark.parametrize("impl", sorted(GRAPHS))
def test_cuda_graphs_replay_priced_work_and_save_host_time(
    impl, request, tmp_path_factory, emulate_and_predict, monkeypatch, megatron_checkout
):
    layers, flags = GRAPHS[impl]
    if layers == "te":  # TE's layers, graphed by TE's make_graphed_callables
        request.getfixturevalue("megatron_checkout_te")
    args = (tmp_path_factory, emulate_and_predict, monkeypatch, megatron_checkout)
    eager, eager_calls = _run(f"eager-{layers}", LAYERS[layers], *args)
    graph, calls = _run(impl, LAYERS[layers] + flags, *args)
    replayed = calls[calls["args"].fillna("").str.contains("cuda_graph_replay")]
    assert (calls["api"] == "cudaGraphLaunch").any() and (replayed["domain"] == "device").all()
    gemms, eager_gemms = _gemms(replayed), set(_gemms(eager_calls))
    assert len(gemms) >= 4 and set(gemms) <= eager_gemms  # the layers' GEMMs, with the eager run's shapes
    assert (replayed["collective_name"] == "allreduce").any()  # the layers' tensor-parallel all-reduces
    assert graph["compute_ns"] >= 0.9 * eager["compute_ns"]  # replays are priced work, not empty launches
    assert graph["iteration_ns"] < eager["iteration_ns"]
    assert graph["host_bound_ns"] / graph["iteration_ns"] < eager["host_bound_ns"] / eager["iteration_ns"]


def test_tp_comm_overlap_fails_loudly_naming_the_api_and_the_flag(tmp_path, monkeypatch, megatron_checkout_te):
    """Userbuffers map peer GPUs' memory (switch multicast on an H100 SXM board): not emulated, so the first call
    fails, and `maya emulate` says which API and which Megatron flag needed it."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.chdir(megatron_checkout_te)
    argv = ["torchrun", "--nproc_per_node=2", "pretrain_gpt.py", *TINY_GPT_TP2, "--sequence-parallel"]
    argv += ["--tp-comm-overlap"]
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(tmp_path / "run"), "--nproc-per-node", "2", "--iterations", "1", "--", *argv]
    )
    assert r.exit_code != 0
    (note,) = [line for line in r.output.splitlines() if line.startswith("note: cuMulticastGetGranularity")]
    assert "--tp-comm-overlap" in note and "userbuffers" in note
