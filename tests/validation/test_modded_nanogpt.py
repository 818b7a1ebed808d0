"""The modded-nanogpt suite kind without emulating: the built-in records and any folder in the `published.json`
layout load (bad folders say what is wrong), every record plans as published on 8 H100s in a working directory
holding synthetic FineWeb shards, the memory comparison, and the shards' format and document lengths."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from maya.core import fineweb_shards
from maya.validation import SuiteError, load_suite, modded_nanogpt
from maya.validation.plan import Predicted, RowPlan

RECORDS = (
    "2024-10-14_ModernArch",
    "2024-11-24_WindowWarmup",
    "2025-01-13_Fp8LmHead",
    "2025-01-26_BatchSize",
    "2025-02-01_RuleTweak",
    "2025-02-08_medium_WeightDecay",
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_builtin_suite_holds_the_six_records(home):
    suite = load_suite("modded-nanogpt")
    assert (suite.kind, tuple(suite.table["record"])) == ("modded-nanogpt", RECORDS)
    medium = suite.table.set_index("record").loc["2025-02-08_medium_WeightDecay"]
    assert (medium["step_avg_ms"], medium["peak_memory_allocated_mib"]) == (235.79, 59737)
    assert list(suite.select('record.str.contains("2025-01")').index) == [2, 3]


@pytest.mark.slow
def test_every_record_plans_on_eight_h100s_in_a_folder_with_shards(home):
    suite = load_suite("modded-nanogpt")
    for row, values in suite.table.iterrows():
        plan: RowPlan = modded_nanogpt.plan(int(row), values)
        assert plan.script.name == "train_gpt.py" and plan.script.parent.name == values["record"]
        assert (plan.hardware, plan.cluster, plan.nnodes, plan.per_node, plan.iterations) == (
            "h100-sxm",
            "dgx-h100",
            1,
            8,
            3,
        )
        assert plan.key.measured_s == pytest.approx(values["step_avg_ms"] / 1e3)
        assert plan.workdir == home / "validation" / "modded-nanogpt"
        assert any(values["torch"] in a for a in plan.assumptions)
    shards = sorted(p.name for p in (plan.workdir / "data" / "fineweb10B").iterdir())
    assert shards == ["fineweb_train_000001.bin", "fineweb_val_000000.bin"]
    assert plan.measured_memory_mib == 59737.0
    assert modded_nanogpt.plan(0, suite.table.loc[0]).measured_memory_mib is None  # 2024-10-14 prints none


def test_a_folder_in_the_published_layout_is_a_suite(tmp_path, home):
    folder = tmp_path / "mine"
    (folder / "run-a").mkdir(parents=True)
    shutil.copy(modded_nanogpt.builtin_folder() / RECORDS[0] / "train_gpt.py", folder / "run-a" / "train_gpt.py")
    rows = [{"record": "run-a", "torch": "2.5.1", "step_avg_ms": 200.0}]
    (folder / "published.json").write_text(json.dumps({"rows": rows}))
    suite = load_suite(str(folder))
    assert (suite.name, suite.kind, len(suite.table)) == ("mine", "modded-nanogpt", 1)
    before = suite.digest
    (folder / "run-a" / "train_gpt.py").write_text("print('changed')\n")
    assert load_suite(str(folder)).digest != before  # the scripts are part of the suite's content


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "no published.json"),
        ({"published.json": "[1, 2"}, "not a published.json"),
        ({"published.json": json.dumps({"rows": [{"record": "a", "torch": "2.5"}]})}, "missing: step_avg_ms"),
        (
            {"published.json": json.dumps({"rows": [{"record": "a", "torch": "2.5", "step_avg_ms": 1}]})},
            "a/train_gpt.py",
        ),
    ],
)
def test_bad_folders_say_what_is_wrong(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(SuiteError, match=message):
        load_suite(str(tmp_path))


def test_memory_is_compared_where_the_record_prints_it():
    assert modded_nanogpt.memory_comparison(40 * 2**30, 40960.0) == {
        "peak_memory_published_mib": 40960.0,
        "memory_error_pct": pytest.approx(0.0),
        "memory_compared": "allocated",
    }
    assert modded_nanogpt.memory_comparison(44 * 2**30, 40960.0)["memory_error_pct"] == pytest.approx(10.0)
    assert modded_nanogpt.memory_comparison(40 * 2**30, None) == {}


@pytest.mark.parametrize(("allocated", "error", "compared"), [(40 * 2**30, 0.0, "allocated"), (None, 10.0, "held")])
def test_the_published_peak_is_compared_with_the_allocated_one(monkeypatch, allocated, error, compared):
    """The records print `max_memory_allocated()`: the prediction's allocated peak is compared with it, not the
    device memory the allocator held (its cached blocks included); a capture without it falls back, saying so."""
    held = Predicted(1.0, None, None, False, None, 44 * 2**30, 80 * 2**30, 0.4, {"peak_allocated_bytes": allocated})
    monkeypatch.setattr(modded_nanogpt, "predict_plan", lambda *args: held)
    plan = SimpleNamespace(measured_memory_mib=40960.0)
    details = modded_nanogpt.predict(plan, Path("run"), "v1", None).details
    assert details["memory_error_pct"] == pytest.approx(error)
    assert details["memory_compared"].startswith(compared)


def test_shards_hold_documents_of_realistic_length(tmp_path):
    root = fineweb_shards.write_shards(tmp_path, train_tokens=2_000_000, val_tokens=300_000)
    raw = (root / "data" / "fineweb10B" / "fineweb_train_000001.bin").read_bytes()
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    assert list(header[:3]) == [20240520, 1, 2_000_000]
    tokens = np.frombuffer(raw[1024:], dtype=np.uint16)
    assert len(tokens) == 2_000_000 and tokens.max() <= 50256 and tokens[0] == 50256
    lengths = np.diff(np.flatnonzero(tokens == 50256))
    assert 650 < lengths.mean() < 750 and 350 < np.median(lengths) < 500  # log-normal: mean 700, median 425
    again = fineweb_shards.tokens(2_000_000, seed=0)
    assert np.array_equal(again, tokens)  # deterministic from the seed
    assert not np.array_equal(fineweb_shards.tokens(2_000_000, seed=1), tokens)
    with pytest.raises(ValueError, match="at least one token"):
        fineweb_shards.tokens(0)


@pytest.mark.parametrize(
    ("by_rank", "error", "named"),
    [({0: 40 * 2**30, 3: 48 * 2**30}, 0.0, None), ({"2": 44 * 2**30, "5": 48 * 2**30}, 10.0, "rank 2's")],
)
def test_the_published_peak_is_compared_with_rank_0s(monkeypatch, by_rank, error, named):
    """The records print rank 0's `max_memory_allocated()`: it is compared with rank 0's predicted peak, not the
    most of any rank's; where rank 0 was not captured, with the lowest captured rank's, named."""
    details = {"peak_allocated_bytes": 48 * 2**30, "peak_allocated_bytes_by_rank": by_rank}
    held = Predicted(1.0, None, None, False, None, 50 * 2**30, 80 * 2**30, 0.4, details)
    monkeypatch.setattr(modded_nanogpt, "predict_plan", lambda *args: held)
    plan = SimpleNamespace(measured_memory_mib=40960.0)
    out = modded_nanogpt.predict(plan, Path("run"), "v1", None).details
    assert out["memory_error_pct"] == pytest.approx(error)
    assert out["memory_compared"].startswith("allocated")
    assert (named in out["memory_compared"]) if named else out["memory_compared"] == "allocated"
