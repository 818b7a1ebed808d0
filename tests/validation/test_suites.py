"""Suites and their rows: the built-ins, `--rows` (numbers and pandas queries) and its errors, and every
published row planned as an emulation on its GPUs and cluster (fp8 and other rows of the same layout too); an fp8
row without Transformer Engine fails, naming the setup that installs it, and the suite goes on."""

import duckdb
import pandas as pd
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators import KernelEstimator, Registry
from maya.installer import transformer_engine
from maya.validation import SuiteError, llm_foundry, load_suite, neusight
from maya.validation.suites import SMOKE_ROWS


def test_builtin_suites():
    full, smoke, ns = load_suite("llm-foundry"), load_suite("llm-foundry-smoke"), load_suite("neusight")
    assert (full.kind, len(full.table)) == ("llm-foundry", 162)
    assert list(smoke.table.index) == list(SMOKE_ROWS) and smoke.digest != full.digest
    assert ns.kind == "neusight" and len(ns.table) == 16
    assert set(ns.table["device"]) == {"NVIDIA A100 80GB PCIe", "NVIDIA L4", "Tesla V100-PCIE-32GB"}


def test_rows_by_number_and_by_query():
    suite = load_suite("llm-foundry")
    assert list(suite.select("3,7,20-22").index) == [3, 7, 20, 21, 22]
    h100 = suite.select('gpu == "h100_80gb" and gpus <= 64')
    assert len(h100) == 17 and (h100["GPU"] == "h100_80gb").all() and (h100["# GPUs"] <= 64).all()
    assert len(suite.select("`# GPUs` >= 128 and ckpt == False")) == len(
        suite.table[(suite.table["# GPUs"] >= 128) & (suite.table["Activation Checkpointing"] != "True")]
    )
    assert list(suite.select("row < 3").index) == [0, 1, 2]
    assert len(suite.select(None)) == 162


@pytest.mark.parametrize(
    "expr, message",
    [
        ('gpu == "h100_80gb" and', "cannot evaluate"),
        ("no_such_column > 3", "no_such_column"),
        ('gpu == "v100"', "selects no row"),
        ("160-170", "row(s) 162, 163"),
        ("5-3", "empty range"),
        ("Model", "not a condition"),
    ],
)
def test_bad_row_selections_say_what_is_wrong(expr, message):
    with pytest.raises(SuiteError, match="--rows") as e:
        load_suite("llm-foundry").select(expr)
    assert message in str(e.value)


def test_bad_suites_say_what_is_wrong(tmp_path):
    with pytest.raises(SuiteError, match="neither a built-in suite"):
        load_suite("llm-foundary")
    bad = tmp_path / "bad.csv"
    bad.write_text("Model,GPU\n1b,h100_80gb\n")
    with pytest.raises(SuiteError, match="missing column.*'SeqLen \\(T\\)'"):
        load_suite(str(bad))
    other = tmp_path / "rows.txt"
    other.write_text("x")
    with pytest.raises(SuiteError, match=r"\.csv .* \.parquet"):
        load_suite(str(other))


@pytest.mark.slow
def test_every_published_row_plans_on_its_gpus_and_cluster():
    suite = load_suite("llm-foundry")
    plans = [llm_foundry.plan(n, v) for n, v in suite.table.iterrows()]
    for plan, (_, row) in zip(plans, suite.table.iterrows()):
        assert plan.key.measured_s == row["step_time_s_derived"] and plan.key.gpus == row["# GPUs"]
        assert plan.nnodes * plan.per_node == plan.key.gpus and plan.per_node == min(plan.key.gpus, 8)
        assert plan.cluster == ("dgx-h100" if row["GPU"] == "h100_80gb" else "a100-roce-1600g")
        backend = plan.args[plan.args.index("--sdpa-backend") + 1]
        assert backend == "flash"
        assert "--steps" in plan.args and plan.iterations == llm_foundry.STEPS
    h100 = next(p for p in plans if p.key.gpu == "h100_80gb")
    assert "8 x 400 Gb/s InfiniBand" in h100.assumptions[0]
    assert len({p.command_hash() for p in plans}) == len(plans)


def test_other_rows_of_the_layout_plan_too(monkeypatch):
    """fp8 rows (on an H100, with Transformer Engine installed), other sizes and GPU counts are accepted; what cannot
    run names itself: an fp8 row on an A100 (no fp8 tensor cores), an unknown GPU, GPUs that do not fill nodes."""
    monkeypatch.setattr(transformer_engine, "installed", lambda: True)
    row = load_suite("llm-foundry").table.loc[20].copy()
    row[["Model", "Precision", "# GPUs", "GlobalBatchSize", "GPU"]] = ["13b", "amp_fp8", 16, 16 * 14, "h100_80gb"]
    plan = llm_foundry.plan(0, row)
    assert ("--precision", "amp_fp8") in zip(plan.args, plan.args[1:]) and (plan.nnodes, plan.hardware) == (
        2,
        "h100-sxm",
    )
    for gpu, part in [("a100_80gb", "a100-sxm-80gb"), ("a100_40gb", "a100-sxm-40gb")]:
        with pytest.raises(ValueError) as refused:
            llm_foundry.plan(0, row.replace({"h100_80gb": gpu}))
        assert str(refused.value) == (
            f"precision amp_fp8 needs fp8 tensor cores (compute capability 8.9 or newer); GPU '{gpu}' ({part}) is 8.0: "
            "use amp_bf16"
        )
    assert (
        llm_foundry.plan(0, row.replace({"h100_80gb": "a100_80gb", "amp_fp8": "amp_bf16"})).hardware == "a100-sxm-80gb"
    )
    with pytest.raises(ValueError, match="'v100'"):
        llm_foundry.plan(0, row.replace({"h100_80gb": "v100"}))
    with pytest.raises(ValueError, match="12 GPUs do not fill nodes of 8"):
        llm_foundry.plan(0, pd.Series({**row.to_dict(), "# GPUs": 12}))


@pytest.mark.slow
def test_an_fp8_row_without_transformer_engine_is_a_failed_row_naming_the_setup(tmp_path, monkeypatch):
    """Without TE's PyTorch extension, and with its installation on first need refused (MAYA_TE_AUTO=off, as the
    tests run), `maya validate` stores an amp_fp8 row as failed, its reason naming the switch and the setup that
    installs it, before anything is emulated; the suite's other rows still run (here a bf16 row that fails planning too,
    so that nothing is emulated)."""
    monkeypatch.setattr(transformer_engine, "installed", lambda: False)
    warehouse = tmp_path / "warehouse.duckdb"
    Registry(warehouse).register(KernelEstimator(), data_hash="stub", config_hash="stub", metrics={})
    monkeypatch.setenv("MAYA_WAREHOUSE", str(warehouse))
    rows = load_suite("llm-foundry").table.loc[[20, 20]].copy()
    rows["Precision"] = ["amp_fp8", "amp_bf16"]
    rows["# GPUs"] = [8, 12]
    path = tmp_path / "mine.csv"
    rows.to_csv(path, index=False)
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 0, out.output
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        stored = con.execute('SELECT "row", status, reason, emulate_s FROM validation_rows ORDER BY "row"').fetchall()
    finally:
        con.close()
    assert [(row, status, emulated) for row, status, _, emulated in stored] == [
        (0, "failed", None),
        (1, "failed", None),
    ]
    assert stored[0][2] == (
        "cannot run this row: precision amp_fp8 (the projections as Transformer Engine fp8 GEMMs: llm-foundry's "
        "fc_type te) needs Transformer Engine's PyTorch extension, which is not installed for this interpreter, and "
        "MAYA_TE_AUTO=off refuses installing it: install it with `MAYA_WITH_TE=1 scripts/setup`"
    )
    assert stored[1][2] == "cannot run this row: 12 GPUs do not fill nodes of 8"


@pytest.mark.slow
def test_an_fp8_row_whose_install_fails_on_the_disk_is_a_failed_row(tmp_path, monkeypatch):
    """An OSError from installing Transformer Engine (a read-only `$MAYA_HOME`) fails that row, with the reason, and
    not the whole `maya validate`."""

    def read_only(needed_by: str) -> None:
        raise PermissionError(13, "Permission denied", "/home/u/.maya/wheels")

    monkeypatch.setattr(transformer_engine, "ensure", read_only)
    warehouse = tmp_path / "warehouse.duckdb"
    Registry(warehouse).register(KernelEstimator(), data_hash="stub", config_hash="stub", metrics={})
    monkeypatch.setenv("MAYA_WAREHOUSE", str(warehouse))
    rows = load_suite("llm-foundry").table.loc[[20]].copy()
    rows["Precision"] = ["amp_fp8"]
    path = tmp_path / "mine.csv"
    rows.to_csv(path, index=False)
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 0, out.output
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        stored = con.execute("SELECT status, reason FROM validation_rows").fetchall()
    finally:
        con.close()
    assert stored == [("failed", "cannot run this row: [Errno 13] Permission denied: '/home/u/.maya/wheels'")]


def test_neusight_rows_plan_on_their_gpu():
    suite = load_suite("neusight")
    plans = [neusight.plan(n, v) for n, v in suite.table.iterrows()]
    assert {p.hardware for p in plans} == {"a100-pcie-80gb", "l4", "v100-pcie-32gb"}
    row = suite.table.iloc[0]
    assert plans[0].key.measured_s == pytest.approx((row["fw_ms"] + row["bw_ms"]) / 1e3)
    with pytest.raises(ValueError, match="single-GPU training"):
        neusight.plan(0, row.replace({"single": "dp4"}))
