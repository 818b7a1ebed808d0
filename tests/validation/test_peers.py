"""`benchmarks/peers.py`: the rows as the peers see them, the 40%-MFU rule of thumb's arithmetic, the figures per
regime, Maya's rows read from the warehouse, Calculon's recompute fix and the report without peers installed
(none of the peers is needed)."""

import importlib.util
import json
import sys
import textwrap

import pytest
from helpers import benchmark_module

from maya.validation.store import RowKey, RowResult, save


@pytest.fixture(scope="module")
def peers():
    return benchmark_module("peers")


@pytest.fixture(scope="module")
def mpt(peers):
    return peers.suite_specs("llm-foundry")


def test_rule_of_thumb_is_six_flops_per_parameter_and_token_at_40_percent_of_peak(peers):
    # 1.3e9 parameters, 2^20 tokens, 8 GPUs of 312 TFLOP/s: 6 * 1.3e9 * 1048576 / (0.4 * 312e12 * 8) = 8.192 s
    assert peers.rule_of_thumb_s(1.3e9, 1048576, 8, 312e12) == pytest.approx(8.192)
    assert peers.rule_of_thumb_s(1.3e9, 1048576, 8, 312e12, mfu=0.5) == pytest.approx(
        peers.rule_of_thumb_s(1.3e9, 1048576, 8, 312e12) * 0.8
    )
    with pytest.raises(ValueError, match="gpus 0"):
        peers.rule_of_thumb_s(1.3e9, 1048576, 0, 312e12)


def test_rule_of_thumb_prices_each_row_at_its_gpus_dense_peak(peers, mpt):
    _, specs = mpt
    times = peers.rule_of_thumb(specs)
    row0 = specs[0]  # 7b, 2,048 tokens, 512 H100 (989.4 TFLOP/s dense bf16), global batch 3,072 sequences
    assert (row0["gpu"], row0["gpus"], row0["params"]) == ("h100_80gb", 512, 6658859008)
    assert times[0] == pytest.approx(6 * 6658859008 * 3072 * 2048 / (0.4 * 989.4e12 * 512))
    a100 = next(s for s in specs if s["gpu"] == "a100_40gb")
    tokens = a100["global_batch"] * a100["seq"]
    assert times[a100["row"]] == pytest.approx(6 * a100["params"] * tokens / (0.4 * 312e12 * a100["gpus"]))


def test_every_mpt_row_is_read_with_its_architecture_batch_and_recomputation(mpt):
    digest, specs = mpt
    assert len(specs) == 162 and len(digest) == 16
    for s in specs:
        d, n, seq = s["hidden"], s["layers"], s["seq"]
        # the architecture the size maps to has the published parameter count
        assert (s["vocab"] + seq) * d + n * (12 * d * d + 13 * d) + 2 * d == s["params"], s["row"]
        assert s["ffn"] == 4 * d and s["head_dim"] * s["heads"] == d
        assert s["global_batch"] % (s["micro_batch"] * s["gpus"]) == 0
    assert sum(s["recompute"] == "full" for s in specs) == 55
    assert sorted({s["zero"] for s in specs}) == [2, 3]
    assert sum(s["zero"] == 2 for s in specs) == 3


def test_sequence_bands_split_the_rows_as_the_docs_do(peers, mpt):
    _, specs = mpt
    counts = {}
    for s in specs:
        counts[peers.sequence_band(s["seq"])] = counts.get(peers.sequence_band(s["seq"]), 0) + 1
    assert counts == {"<=4k": 109, "8-16k": 31, ">=32k": 22}


def test_megatron_rows_map_to_calculons_own_encoding_of_them(peers):
    _, specs = peers.suite_specs("korthikanti2022")
    assert len(specs) == 8
    full, selective, gpt3 = specs[0], specs[1], specs[2]
    # calculon-ai/calculon@caa4b11 validation/seqsel/tab5/megatron-22B_full.json
    assert peers.calculon_execution(full) == {
        "num_procs": 8,
        "tensor_par": 8,
        "pipeline_par": 1,
        "data_par": 1,
        "tensor_par_net": 0,
        "pipeline_par_net": 1,
        "data_par_net": 1,
        "batch_size": 4,
        "microbatch_size": 4,
        "datatype": "float16",
        "fused_activation": False,
        "attention_type": "multihead",
        "activation_recompute": "full",
        "pipeline_interleaving": 1,
        "optimizer_sharding": False,
        "tensor_par_comm_type": "ar",
        "tensor_par_overlap": "none",
        "seq_par_ag_redo": False,
        "data_par_overlap": False,
        "weight_offload": False,
        "activations_offload": False,
        "optimizer_offload": False,
        "training": True,
    }
    # ... and megatron-22B_seqsel.json: selective recomputation with sequence parallelism
    changed = {k: v for k, v in peers.calculon_execution(selective).items() if peers.calculon_execution(full)[k] != v}
    assert changed == {"activation_recompute": "attn_only", "tensor_par_comm_type": "rs_ag", "seq_par_ag_redo": True}
    assert peers.calculon_execution(gpt3)["pipeline_interleaving"] == 3  # 96 layers, PP 8, 4 a virtual stage
    assert full["params"] == pytest.approx(22.07e9, rel=1e-3)


def test_mpt_rows_run_fsdp_as_calculons_sharded_overlapped_data_parallelism(peers, mpt):
    _, specs = mpt
    one_node = next(s for s in specs if s["gpus"] == 8)
    many = next(s for s in specs if s["gpus"] > 8)
    for s, net in ((one_node, 0), (many, 1)):
        e = peers.calculon_execution(s)
        assert (e["data_par"], e["data_par_net"], e["optimizer_sharding"], e["data_par_overlap"]) == (
            s["gpus"],
            net,
            True,
            True,
        )


def test_a_megatron_row_no_peer_models_is_refused_by_name(peers):
    from maya.validation.suites import load_suite

    table = load_suite("korthikanti2022").table.head(1).copy()
    table["swiglu"] = "true"
    with pytest.raises(ValueError, match="row 0: no peer models swiglu"):
        peers.megatron_specs(table)


def test_figures_per_regime_and_on_a_subset_of_rows(peers):
    specs = [
        {"row": 0, "gpu": "a100_40gb", "seq": 2048, "measured_s": 1.0},
        {"row": 1, "gpu": "a100_40gb", "seq": 65536, "measured_s": 2.0},
        {"row": 2, "gpu": "h100_80gb", "seq": 8192, "measured_s": 4.0},
    ]
    errors = peers.errors_pct({0: 1.1, 1: 1.0, 2: 5.0}, specs)
    assert errors == pytest.approx({0: 10.0, 1: -50.0, 2: 25.0})
    got = {f["regime"]: f for f in peers.figures(errors, specs)}
    assert list(got) == ["all", "gpu a100_40gb", "gpu h100_80gb", "seq <=4k", "seq 8-16k", "seq >=32k"]
    assert got["all"]["rows"] == 3
    assert got["all"]["mean_abs_error_pct"] == pytest.approx(85 / 3)
    assert got["all"]["mean_signed_error_pct"] == pytest.approx(-15 / 3)
    assert got["all"]["max_abs_error_pct"] == pytest.approx(50.0)
    assert got["gpu a100_40gb"]["mean_signed_error_pct"] == pytest.approx(-20.0)
    subset = {f["regime"]: f for f in peers.figures(errors, specs, rows={0, 2})}
    assert subset["all"]["rows"] == 2 and "seq >=32k" not in subset


def _result(suite_digest, row, predicted, status="ok", version="v1"):
    key = RowKey(row=row, label=f"row {row}", gpu="a100_40gb", size="1b", gpus=8, measured_s=1.0)
    return RowResult(
        suite="llm-foundry",
        suite_digest=suite_digest,
        kind="llm-foundry",
        key=key,
        estimator_version=version,
        predictor_digest="p",
        status=status,
        predicted_s=predicted,
    )


@pytest.mark.slow
def test_maya_rows_are_each_rows_latest_prediction_of_the_same_suite_content(peers, mpt, tmp_path):
    digest, _ = mpt
    warehouse = tmp_path / "warehouse.duckdb"
    assert peers.maya_predictions(warehouse, digest) == {}  # no warehouse: no rows
    save(_result(digest, 3, 1.0, version="v0"), warehouse)
    save(_result(digest, 3, 2.0, version="v1"), warehouse)  # later, another estimator version
    save(_result(digest, 4, 1.5, version="v0"), warehouse)
    save(_result(digest, 4, None, status="failed"), warehouse)  # the latest run of row 4 failed: not predicted
    save(_result("another suite file", 5, 1.0), warehouse)
    assert peers.maya_predictions(warehouse, digest) == {3: 2.0}


def test_calculon_fix_adds_each_layers_own_forward_not_the_running_total(peers, tmp_path, monkeypatch):
    package = tmp_path / "calculon"
    (package / "llm").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "llm" / "__init__.py").write_text("")
    body = "".join(f"    {wrong}" for wrong in peers.CALCULON_RECOMPUTE_FIX)
    (package / "llm" / "llm.py").write_text(
        textwrap.dedent(
            """
            class Llm:
                def recompute(self, layers):
                    self._block_fw_flops = self._block_fw_flops_time = 0
                    self._block_fw_mem_accessed = self._block_fw_mem_time = 0
                    self._block_re_flops = self._block_re_flops_time = 0
                    self._block_re_mem_accessed = self._block_re_mem_time = 0
                    for layer in layers:
                        self._block_fw_flops += layer.get_fw_flops()
                        self._block_fw_flops_time += layer.compute_flops_time("fw")
                        self._block_fw_mem_accessed += layer.get_fw_mem_accessed()
                        self._block_fw_mem_time += layer.compute_mem_time("fw")
            """
        )
        + textwrap.indent(body, "        ")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "calculon" or m.startswith("calculon.")]:
        monkeypatch.delitem(sys.modules, name)

    class Layer:
        def get_fw_flops(self):
            return 1

        def compute_flops_time(self, _):
            return 1

        get_fw_mem_accessed = get_fw_flops
        compute_mem_time = compute_flops_time

    as_is, fixed = peers.calculon_llm(False)(), peers.calculon_llm(True)()
    as_is.recompute([Layer()] * 4)
    fixed.recompute([Layer()] * 4)
    assert as_is._block_re_mem_time == 1 + 2 + 3 + 4  # the running totals: the bug
    assert (fixed._block_re_flops, fixed._block_re_flops_time, fixed._block_re_mem_time) == (4, 4, 4)
    (package / "llm" / "llm.py").write_text("class Llm:\n    pass\n")
    with pytest.raises(RuntimeError, match="not Calculon caa4b11's"):
        peers.calculon_llm(True)


@pytest.mark.slow
def test_without_peers_or_maya_rows_the_rule_of_thumb_is_reported_alone(peers, tmp_path, capsys):
    warehouse = tmp_path / "empty.duckdb"
    args = ["--suite", "korthikanti2022", "--warehouse", str(warehouse), "--peers-python", sys.executable]
    assert peers.main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["suites"]["korthikanti2022"]
    assert report["maya_rows"] == [] and report["figures_on_maya_rows"] == {}
    assert "no Calculon checkout" in report["unavailable"]["calculon"]
    if importlib.util.find_spec("llm_analysis") is None:  # Maya's environment keeps the peers out
        assert "not installed" in report["unavailable"]["llm-analysis"]
    assert "maya" not in report["figures"]
    assert report["figures"]["rule-of-thumb"][0]["rows"] == 8
    assert [p["rule-of-thumb"] > 0 for p in report["predictions"]] == [True] * 8
    assert peers.main(args) == 0
    assert "no Maya rows for this suite" in capsys.readouterr().out


def test_a_peer_missing_at_its_first_row_is_unavailable_and_a_later_import_error_fails_one_row(peers):
    specs = [{"suite": "s", "row": r} for r in range(3)]

    def missing(spec):
        raise ImportError("No module named 'llm_analysis'")

    assert "not installed" in peers.run_peer("p", missing, specs)["error"]

    def lazy_import_fails_on_row_1(spec):
        if spec["row"] == 1:
            raise ImportError("cannot import name 'x'")
        return {"predicted_s": 1.0, "oom": False}

    out = peers.run_peer("p", lazy_import_fails_on_row_1, specs)
    assert sorted(out["rows"]) == ["s:0", "s:2"] and list(out["not_run"]) == ["s:1"]
