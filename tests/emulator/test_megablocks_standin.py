"""Maya's stand-in for MegaBlocks' CUDA extension (`emulator/standins/megablocks_ops.py`) and the installer of its
Python code (`maya.installer.megablocks`)."""

import importlib
import json
import sys

import pytest
import torch
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.runner import STANDINS
from maya.installer import grouped_gemm, megablocks, python_code

runner = CliRunner()
NAME = "megablocks_ops"


@pytest.fixture
def standin(monkeypatch):
    """The stand-in module as a rank imports it (last on the path), computing on the host: its checks of the device
    pass host tensors, so each call's values are checked against the definition."""
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    module = importlib.import_module(NAME)
    monkeypatch.setattr(module, "_on_device", lambda t: True)
    yield module
    sys.modules.pop(NAME, None)


def test_prefix_sums_of_each_row_into_the_callers_buffer(standin):
    x = torch.tensor([[3, 0, 2, 5], [1, 1, 0, 4]], dtype=torch.int32)
    out = torch.empty_like(x)
    standin.inclusive_cumsum(x, 1, out)
    assert out.tolist() == [[3, 3, 5, 10], [1, 2, 2, 6]]
    standin.exclusive_cumsum(x, 1, out)
    assert out.tolist() == [[0, 3, 3, 5], [0, 1, 2, 2]]


def test_a_histogram_counts_the_bins_values_alone_as_int32(standin):
    """1-d gives [bins], 2-d a row of counts per row; values outside 0 .. bins - 1 are not counted (cub's even
    histogram over [0, bins))."""
    flat = standin.histogram(torch.tensor([2, 0, 2, 3, 7, -1], dtype=torch.int64), 4)
    assert flat.dtype == torch.int32 and flat.tolist() == [1, 0, 2, 1]
    rows = standin.histogram(torch.tensor([[1, 1, 0], [3, 3, 3]], dtype=torch.int16), 4)
    assert rows.tolist() == [[1, 2, 0, 0], [0, 0, 0, 3]]
    assert standin.histogram(torch.tensor([[1, 2]], dtype=torch.int32), 0).shape == (1, 0)


def test_a_sort_is_stable_and_gives_where_each_key_came_from_in_the_keys_type(standin):
    x = torch.tensor([2, 0, 1, 0, 2, 1], dtype=torch.int32)
    keys, iota = torch.empty_like(x), torch.empty_like(x)
    standin.sort(x, 32, keys, iota)
    assert keys.tolist() == [0, 0, 1, 1, 2, 2] and iota.tolist() == [1, 3, 2, 5, 0, 4]


def test_the_topology_gives_each_experts_block_rows_its_columns(standin):
    """Experts of 256, 0, 256 and 512 padded rows in blocks of 128, each expert 2 block columns wide."""
    padded_bins = torch.tensor([256, 256, 512, 1024], dtype=torch.int32)
    out = torch.empty(8 * 2, dtype=torch.int16)
    standin.indices(padded_bins, 128, 8, 2, out)
    expert_of_row = [0, 0, 2, 2, 3, 3, 3, 3]
    assert out.view(8, 2).tolist() == [[e * 2, e * 2 + 1] for e in expert_of_row]


def test_replication_repeats_each_bins_value_and_its_backward_sums_the_bins(standin):
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float16)
    bins = torch.tensor([2, 2, 5], dtype=torch.int32)  # widths 2, 0, 3
    out = torch.empty(2, 5, dtype=torch.float16)
    standin.replicate_forward(x, bins, out)
    assert out.tolist() == [[1, 1, 3, 3, 3], [4, 4, 6, 6, 6]]
    grad = torch.arange(10, dtype=torch.float16).view(2, 5)
    summed = torch.empty(2, 3, dtype=torch.float16)
    standin.replicate_backward(grad, bins, summed)
    assert summed.tolist() == [[1, 0, 9], [11, 0, 24]]


def test_calls_the_extension_would_refuse_or_maya_does_not_implement_fail_naming_themselves(standin):
    x = torch.zeros(2, 3, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"megablocks_ops\.inclusive_cumsum: only dim 1 is supported"):
        standin.inclusive_cumsum(x, 0, torch.empty_like(x))
    with pytest.raises(RuntimeError, match=r"megablocks_ops\.histogram: x must be a 1-d or 2-d device int tensor"):
        standin.histogram(torch.zeros(3, dtype=torch.float32), 4)
    with pytest.raises(RuntimeError, match=r"megablocks_ops\.replicate_backward: grad must be a 2-d fp16"):
        standin.replicate_backward(torch.zeros(2, 3), torch.ones(1, dtype=torch.int32), torch.zeros(2, 1))
    with pytest.raises(AttributeError, match=r"megablocks_ops\.binned_gather is not implemented by Maya"):
        standin.binned_gather  # noqa: B018


def test_a_capture_failing_on_a_missing_megablocks_says_how_to_install_it():
    for reason in (
        "rank 0: ModuleNotFoundError: No module named 'megablocks'",
        "No module named 'megablocks_ops'.",
        "rank 0: ModuleNotFoundError: No module named 'stk'",
    ):
        assert megablocks.install_command() in megablocks.missing_hint(reason)
    assert megablocks.missing_hint("rank 0: ModuleNotFoundError: No module named 'mega'") is None
    megablocks_own = "AssertionError: Grouped GEMM not available. Please run `pip install git+https://github.com/tgale96/grouped_gemm@main`."
    assert grouped_gemm.install_command() in grouped_gemm.missing_hint(megablocks_own)


def test_megablocks_is_installed_only_with_its_companion_at_its_pin_and_reads_its_version_file(tmp_path, monkeypatch):
    """MegaBlocks keeps its version in megablocks/_version.py; the release counts as installed only beside
    stanford-stk at its pin, so a missing companion is installed again."""
    tree = tmp_path / "megablocks-main"
    (tree / "megablocks" / "layers").mkdir(parents=True)
    (tree / "megablocks" / "__init__.py").write_text("from megablocks._version import __version__\n")
    (tree / "megablocks" / "_version.py").write_text("__version__ = '0.10.1'\n")
    (tree / "megablocks" / "layers" / "dmoe.py").write_text("")
    (tree / "setup.py").write_text("setup(name='megablocks', version=repo_version)\n")
    assert python_code.identity(megablocks.MEGABLOCKS, tree) == ("megablocks", "0.10.1")
    project = python_code.python_project(megablocks.MEGABLOCKS, tree, tmp_path / "scratch")
    assert (project / "megablocks" / "layers" / "dmoe.py").is_file()
    versions = {"megablocks": "0.10.0", "stanford-stk": "0.7.1"}
    monkeypatch.setattr(python_code, "installed_version", versions.get)
    assert python_code.already_installed(megablocks.MEGABLOCKS, "megablocks==0.10.0") == "megablocks 0.10.0"
    versions["stanford-stk"] = None
    assert python_code.already_installed(megablocks.MEGABLOCKS, "megablocks==0.10.0") is None


@pytest.mark.slow  # an emulation: ~20 s (MegaBlocks' Triton kernels autotune)
def test_megablocks_dropless_moe_runs_unchanged_on_grouped_gemm(tmp_path):
    """MegaBlocks' own `dMoE` (grouped experts) trains in a rank: its routing runs on the stand-in's calls, each
    expert's GEMMs on grouped_gemm's stand-in, and the prediction names both. (Its default experts, `sparse`, are
    refused by MegaBlocks itself with torch's Triton: "Sparse MLP is not supported with triton >=3.2.0".)"""
    if megablocks.installed() is None or grouped_gemm.installed() is None:
        pytest.skip(f"MegaBlocks or grouped_gemm is not installed ({megablocks.install_command()}; scripts/setup does)")
    out = tmp_path / "run"
    script = ["python", str(WORKLOADS / "megablocks_dmoe.py"), "--impl", "grouped"]
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", *script])
    assert r.exit_code == 0, r.output
    printed = json.loads(next(line for line in r.output.splitlines() if line.startswith("{")))
    assert printed == {"impl": "grouped", "out": [256, 2, 256], "experts": [[2048, 256], [2048, 256]]}

    from maya.simulator.trace import load

    ops = load(out).ranks[0].ops
    ranges = ops["name"][ops["name"].str.startswith(("megablocks_ops::", "grouped_gemm::"))].value_counts().to_dict()
    # per step: one sort, histogram and prefix sum of the experts' ids; 2 forward gmm and 3 in the backward
    assert ranges == {"megablocks_ops::sort": 2, "megablocks_ops::histogram": 2, "megablocks_ops::inclusive_cumsum": 2,
                      "grouped_gemm::gmm": 10}  # fmt: skip
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    notes = " ".join(json.loads(predicted.stdout)["notes"])
    assert "6 MegaBlocks extension call(s) (histogram 2, inclusive_cumsum 2, sort 2)" in notes
    assert "10 grouped_gemm call(s) (gmm 10)" in notes
