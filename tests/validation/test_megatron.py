"""The megatron suite kind: a CSV of `pretrain_gpt.py` arguments and measured iteration times (the built-in
`korthikanti2022`) planned as Megatron-LM's own script on the row's GPUs and cluster."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from maya.installer import transformer_engine
from maya.validation import load_suite, megatron, megatron_exchange
from maya.validation.plan import RowPlan


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A stand-in Megatron-LM checkout (only its entry point) named by MAYA_MEGATRON_LM."""
    (tmp_path / "pretrain_gpt.py").write_text("print('pretrain')\n")
    monkeypatch.setenv("MAYA_MEGATRON_LM", str(tmp_path))
    return tmp_path


def _flags(plan: RowPlan) -> dict[str, str | None]:
    """`--name value` and bare `--flag` (None) of a plan's arguments."""
    out, args = {}, list(plan.args)
    for i, a in enumerate(args):
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_korthikanti2022_is_built_in():
    suite = load_suite("korthikanti2022")
    assert suite.kind == "megatron" and list(suite.table.index) == list(range(8))
    assert list(suite.select('model == "175B"').index) == [2, 3]
    assert suite.table["measured_step_s"].tolist()[:2] == [1.42, 1.1]


@pytest.fixture
def without_te(monkeypatch):
    """An interpreter without Transformer Engine: rows run Megatron's local implementation."""
    monkeypatch.setattr(transformer_engine, "installed", lambda: False)


@pytest.fixture
def exchange_copy(checkout, monkeypatch):
    """The rows of the 2022 pipeline exchange plan a stand-in patched copy, as if the patch were written for the
    stand-in checkout (`test_megatron_exchange.py` patches and checks the file)."""
    copy = checkout / "patched"
    copy.mkdir()
    (copy / "pretrain_gpt.py").write_text("print('pretrain')\n")
    monkeypatch.setattr(megatron_exchange, "fits", lambda path: True)
    monkeypatch.setattr(megatron_exchange, "patched", lambda path: copy)
    return copy


def test_rows_plan_pretrain_gpt_with_their_arguments(checkout, exchange_copy, without_te):
    suite = load_suite("korthikanti2022")
    full = megatron.plan(2, suite.table.loc[2])  # 175B, TP8 PP8 VP4, full recompute
    assert full.script == exchange_copy / "pretrain_gpt.py"
    flags = _flags(full)
    assert flags["--tensor-model-parallel-size"] == "8" and flags["--pipeline-model-parallel-size"] == "8"
    assert flags["--num-layers-per-virtual-pipeline-stage"] == "4"
    assert flags["--recompute-granularity"] == "full" and flags["--recompute-method"] == "uniform"
    assert flags["--recompute-num-layers"] == "1" and flags["--max-position-embeddings"] == "2048"
    assert "--fp16" in flags and "--bf16" not in flags
    assert "--sequence-parallel" not in flags and "--use-distributed-optimizer" not in flags
    assert "--swiglu" not in flags and "--num-query-groups" not in flags
    assert flags["--train-iters"] == str(megatron.STEPS) and "--mock-data" in flags
    assert (full.hardware, full.cluster, full.nnodes, full.per_node) == ("a100-sxm-80gb", "dgx-a100", 8, 8)
    assert dict(full.env) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert full.key.measured_s == 18.13 and full.seq == 2048
    assert full.assumptions == (megatron.ASSUMPTION, megatron_exchange.ASSUMPTION)
    assert flags["--transformer-impl"] == "local" and "--no-masked-softmax-fusion" in flags
    assert "--attention-backend" not in flags
    selective_plan = megatron.plan(3, suite.table.loc[3])
    selective = _flags(selective_plan)
    assert selective["--recompute-granularity"] == "selective" and "--recompute-method" not in selective
    # Megatron's local implementation refuses sequence parallelism without apex/TE: dropped, and said
    assert "--sequence-parallel" not in selective and megatron.WITHOUT_SP in selective_plan.assumptions
    assert selective_plan.key.label.endswith(" sp [local]")  # the layers that ran, named in the stored row
    assert megatron.plan(2, suite.table.loc[2]).command_hash() != megatron.plan(3, suite.table.loc[3]).command_hash()


def test_with_transformer_engine_rows_run_its_unfused_attention_and_keep_sequence_parallelism(checkout, monkeypatch):
    monkeypatch.setattr(transformer_engine, "installed", lambda: True)
    suite = load_suite("korthikanti2022")
    full_plan, selective_plan = megatron.plan(0, suite.table.loc[0]), megatron.plan(1, suite.table.loc[1])
    full, selective = _flags(full_plan), _flags(selective_plan)
    for flags in (full, selective):
        assert flags["--transformer-impl"] == "transformer_engine" and flags["--attention-backend"] == "unfused"
        assert "--no-gradient-accumulation-fusion" in flags  # Megatron's LM head needs apex for the fusion
        assert "--no-masked-softmax-fusion" not in flags and "--no-persist-layer-norm" not in flags
        assert flags["--train-iters"] == str(megatron.STEPS) and "--mock-data" in flags
    assert "--sequence-parallel" in selective and "--sequence-parallel" not in full
    assert full_plan.assumptions == selective_plan.assumptions == (megatron.TE_ASSUMPTION,)
    assert full_plan.key.label.endswith(" recompute full [TE]") and selective_plan.key.label.endswith(" sp [TE]")
    monkeypatch.setattr(transformer_engine, "installed", lambda: False)
    assert megatron.plan(1, suite.table.loc[1]).command_hash() != selective_plan.command_hash()


def test_a_suite_file_of_that_layout_with_its_own_cluster_and_gqa(checkout, tmp_path):
    path = tmp_path / "mine.csv"
    pd.DataFrame(
        [
            {
                "row": 0,
                "model": "tiny",
                "gpu": "h100_80gb",
                "gpus": 16,
                "num_layers": 4,
                "num_query_groups": 2,
                "tensor_model_parallel_size": 2,
                "recompute_granularity": "none",
                "precision": "bf16",
                "measured_step_s": 0.5,
                "cluster": "hgx-h200",
            }
        ]
    ).to_csv(path, index=False)
    suite = load_suite(str(path))
    plan = megatron.plan(0, suite.table.loc[0])
    flags = _flags(plan)
    assert suite.kind == "megatron" and "--group-query-attention" in flags and flags["--num-query-groups"] == "2"
    assert "--recompute-granularity" not in flags and "--bf16" in flags
    assert (plan.hardware, plan.cluster, plan.nnodes) == ("h100-sxm", "hgx-h200", 2)


@pytest.mark.parametrize(
    "change, message",
    [({"precision": "fp4"}, "precision 'fp4'"), ({"gpu": "v100"}, "GPU 'v100'"), ({"gpus": 12}, "12 GPUs")],
)
def test_rows_that_cannot_run_say_why(checkout, without_te, change, message):
    values = load_suite("korthikanti2022").table.loc[0].copy()
    for k, v in change.items():
        values[k] = v
    with pytest.raises(ValueError, match=message):
        megatron.plan(0, values)


def test_a_checkout_without_pretrain_gpt_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_MEGATRON_LM", str(tmp_path))
    with pytest.raises(ValueError, match="MAYA_MEGATRON_LM=.*no pretrain_gpt.py"):
        megatron.plan(0, load_suite("korthikanti2022").table.loc[0])


@pytest.fixture
def cloned(tmp_path, monkeypatch):
    """No MAYA_MEGATRON_LM, megatron-core 0.9.0 installed, and a fake clone that counts its calls."""
    monkeypatch.delenv("MAYA_MEGATRON_LM", raising=False)
    monkeypatch.setenv("MAYA_HOME", str(tmp_path))
    monkeypatch.setattr(megatron.metadata, "version", lambda name: "0.9.0")
    calls = []

    def clone(branch, into):
        calls.append(branch)
        into.mkdir()
        time.sleep(0.2)  # long enough for a second caller to arrive while this one clones
        (into / "pretrain_gpt.py").write_text("print('pretrain')\n")

    monkeypatch.setattr(megatron, "_clone", clone)
    return calls


def test_concurrent_checkouts_clone_once(cloned, tmp_path):
    start = threading.Barrier(2)

    def one():
        start.wait()
        return megatron.checkout()

    with ThreadPoolExecutor(2) as pool:
        paths = [f.result() for f in [pool.submit(one), pool.submit(one)]]
    assert paths == [tmp_path / "megatron-lm" / "core_r0.9.0"] * 2
    assert cloned == ["core_r0.9.0"]
    assert (paths[0] / "pretrain_gpt.py").is_file()
    assert not (tmp_path / "megatron-lm" / ".core_r0.9.0.partial").exists()


def test_a_failed_clone_says_why_and_leaves_no_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("MAYA_MEGATRON_LM", raising=False)
    monkeypatch.setenv("MAYA_HOME", str(tmp_path))
    monkeypatch.setattr(megatron.metadata, "version", lambda name: "0.9.0")
    monkeypatch.setattr(megatron, "_clone", lambda branch, into: "fatal: Remote branch core_r0.9.0 not found")
    with pytest.raises(ValueError, match="could not clone Megatron-LM's core_r0.9.0.*not found"):
        megatron.checkout()
    assert not (tmp_path / "megatron-lm" / "core_r0.9.0").exists()
