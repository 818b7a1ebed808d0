"""Maya's stand-in for grouped_gemm's CUDA extension (`emulator/standins/grouped_gemm_backend.py`) and the installer
of grouped_gemm's Python code (`maya.installer.grouped_gemm`)."""

import importlib
import json
import sys

import pytest
import torch
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.runner import STANDINS
from maya.installer import grouped_gemm as installer

runner = CliRunner()


@pytest.fixture(scope="module")
def standin():
    """The stand-in module, imported as a rank imports it (last on the path)."""
    sys.path.append(str(STANDINS))
    try:
        yield importlib.import_module("grouped_gemm_backend")
    finally:
        sys.path.remove(str(STANDINS))
        sys.modules.pop("grouped_gemm_backend", None)


def _reference_gmm(a, b, sizes, trans_a, trans_b):
    """What the extension computes, group by group."""
    out, start = [], 0
    for i, rows in enumerate(sizes):
        part = a[start : start + rows]
        if trans_a:
            out.append(part.t() @ b[start : start + rows])
        else:
            out.append(part @ (b[i].t() if trans_b else b[i]))
        start += rows
    return torch.stack(out) if trans_a else torch.cat(out)


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False)])
def test_gmm_computes_each_groups_product_into_the_callers_buffer(standin, trans_a, trans_b):
    """Groups of 3, 0 (no rows: no GEMM, a zero weight gradient) and 5 rows, as the extension's cuBLAS mode runs them."""
    torch.manual_seed(0)
    sizes = [3, 0, 5]
    a = torch.randn(8, 4, dtype=torch.float64)
    if trans_a:
        b = torch.randn(8, 6, dtype=torch.float64)
        c = torch.full((3, 4, 6), torch.nan, dtype=torch.float64)
    else:
        b = torch.randn(3, 6, 4, dtype=torch.float64) if trans_b else torch.randn(3, 4, 6, dtype=torch.float64)
        c = torch.full((8, 6), torch.nan, dtype=torch.float64)
    buffer = c.data_ptr()
    standin._gmm(a, b, c, sizes, trans_a, trans_b)
    assert c.data_ptr() == buffer
    torch.testing.assert_close(c, _reference_gmm(a, b, sizes, trans_a, trans_b))
    if trans_a:
        assert torch.equal(c[1], torch.zeros(4, 6, dtype=torch.float64))


def _routing(tokens=6, top_k=2, experts=3, seed=1):
    generator = torch.Generator().manual_seed(seed)
    indices = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(tokens)]).int()
    return torch.randn(tokens, 5, dtype=torch.float64, generator=generator), indices


@pytest.mark.parametrize("kept", [0, 9])
def test_permute_groups_the_choices_by_expert_stably_and_maps_each_back(standin, kept):
    """Row i of the output is the token of the i-th choice in (expert, token) order; `row_id_map[k * tokens + t]`
    says where token t's k-th choice went, -1 past the kept rows."""
    x, indices = _routing()
    permuted, row_map = standin._permute(x, indices, kept)
    tokens, top_k = indices.shape
    choices = sorted((int(indices[t, k]), t, k) for t in range(tokens) for k in range(top_k))
    limit = kept or tokens * top_k
    assert permuted.shape == (limit, 5) and row_map.dtype == torch.int32
    for slot, (_, t, k) in enumerate(choices):
        assert int(row_map[k * tokens + t]) == (slot if slot < limit else -1)
        if slot < limit:
            assert torch.equal(permuted[slot], x[t])


def _reference_unpermute(rows, row_map, prob, tokens, top_k):
    out = torch.zeros(tokens, rows.shape[1], dtype=rows.dtype)
    for t in range(tokens):
        for k in range(top_k):
            r = int(row_map[k * tokens + t])
            if r >= 0:
                out[t] += rows[r] * (1.0 if prob is None else prob[t, k])
    return out


@pytest.mark.parametrize("kept, weighted", [(0, True), (9, True), (0, False)])
def test_unpermute_sums_each_tokens_weighted_rows_and_its_backward_is_the_gradient(standin, kept, weighted):
    """The forward against the definition; the backward's two gradients against autograd of the forward (a dropped
    choice adds nothing and gets a zero weight gradient)."""
    x, indices = _routing()
    tokens, top_k = indices.shape
    rows, row_map = standin._permute(x, indices, kept)
    prob = torch.rand(tokens, top_k, dtype=torch.float64) if weighted else None
    out = standin._unpermute(rows, row_map, prob, tokens, top_k)
    torch.testing.assert_close(out, _reference_unpermute(rows, row_map, prob, tokens, top_k))
    if not weighted:
        return
    rows_ = rows.clone().requires_grad_()
    prob_ = prob.clone().requires_grad_()
    grad = torch.randn(tokens, 5, dtype=torch.float64)
    want_rows, want_prob = torch.autograd.grad(
        _reference_unpermute(rows_, row_map, prob_, tokens, top_k), (rows_, prob_), grad
    )
    got_rows, got_prob = standin._unpermute_bwd(grad, rows, row_map, prob)
    assert got_rows.shape == rows.shape and got_prob.dtype == torch.float32
    torch.testing.assert_close(got_rows, want_rows)
    torch.testing.assert_close(got_prob, want_prob.float())


def test_the_first_permute_makes_the_forks_sort_buffers(standin):
    """Sorted keys, row ids, sorted row ids (int32) and the sort's scratch, for the most choices to come."""
    made = standin._workspace(12, torch.device("cpu"))
    assert [(t.dtype, t.numel()) for t in made] == [(torch.int32, 12)] * 3 + [(torch.int8, 96)]
    assert torch.equal(made[1], torch.arange(12, dtype=torch.int32))


def test_calls_the_extension_would_refuse_or_maya_cannot_answer_fail_naming_themselves(standin):
    a = torch.zeros(4, 2, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.gmm: batch_sizes must be a host tensor"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64, device="meta"), False, False)
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.gmm: a must be a 2-d device tensor"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64), False, False)
    with pytest.raises(RuntimeError, match=r"gmm: trans_a and trans_b cannot both be set"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64), True, True)
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.permute: the input must be a 2-d device tensor"):
        standin.permute(a, torch.zeros(4, 1, dtype=torch.int32), 0, [], 4)
    with pytest.raises(NotImplementedError, match=r"grouped_gemm_backend\.sinkhorn is not implemented by Maya"):
        standin.sinkhorn(a)
    with pytest.raises(AttributeError, match=r"grouped_gemm_backend\.moe_permute is not implemented by Maya"):
        standin.moe_permute  # noqa: B018


def test_a_capture_failing_on_a_missing_grouped_gemm_says_how_to_install_it():
    for reason in (
        "rank 0: ModuleNotFoundError: No module named 'grouped_gemm'",
        "rank 0: RuntimeError: Grouped GEMM is not available. Please run `pip install --no-build-isolation "
        "git+https://github.com/fanshiqing/grouped_gemm@main` (takes less than 5 minutes)",
    ):
        assert installer.install_command() in installer.missing_hint(reason)
    assert installer.missing_hint("rank 0: ModuleNotFoundError: No module named 'grouped'") is None


def test_the_installer_takes_the_packages_python_code_alone_under_its_name_and_version(tmp_path):
    tree = tmp_path / "checkout"
    (tree / "grouped_gemm").mkdir(parents=True)
    (tree / "grouped_gemm" / "__init__.py").write_text("import grouped_gemm.ops\n")
    (tree / "grouped_gemm" / "ops_test.py").write_text("")
    (tree / "csrc").mkdir()
    (tree / "LICENSE").write_text("Apache License 2.0\n")
    (tree / "setup.py").write_text(
        'setup(\n    name="grouped_gemm",\n    version="1.1.4",\n    ext_modules=ext_modules)\n'
    )
    assert installer.source_tree(str(tree), tmp_path) == tree
    project = installer.python_project(tree, tmp_path / "scratch")
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*")) == [
        "LICENSE", "grouped_gemm", "grouped_gemm/__init__.py", "pyproject.toml",
    ]  # fmt: skip
    meta = (project / "pyproject.toml").read_text()
    assert 'name = "grouped_gemm"' in meta and 'version = "1.1.4"' in meta and 'packages = ["grouped_gemm"]' in meta
    (tree / "setup.py").write_text("setup(name='grouped_gemm')\n")
    with pytest.raises(installer.SourceError, match="no version in setup.py"):
        installer.python_project(tree, tmp_path / "again")
    with pytest.raises(installer.SourceError, match=r"no grouped_gemm/__init__.py"):
        installer.source_tree(str(tmp_path / "scratch"), tmp_path)


@pytest.mark.parametrize(
    "url, split",
    [
        ("https://github.com/fanshiqing/grouped_gemm@v1.1.4", ("https://github.com/fanshiqing/grouped_gemm", "v1.1.4")),
        ("https://github.com/fanshiqing/grouped_gemm", ("https://github.com/fanshiqing/grouped_gemm", "")),
        ("ssh://git@github.com/fanshiqing/grouped_gemm", ("ssh://git@github.com/fanshiqing/grouped_gemm", "")),
    ],
)
def test_a_git_source_names_its_ref_after_its_last_at(url, split):
    assert installer._git_ref(url) == split


@pytest.mark.slow  # an emulation: ~10 s
def test_an_moe_layer_on_grouped_gemms_ops_runs_unchanged_one_gemm_per_expert(tmp_path):
    """grouped_gemm's own Python code (`ops.gmm`, and the fork's `ops.permute`/`ops.unpermute` where installed) trains
    a top-2 MoE layer in a rank: each gmm is one GEMM per expert of the balanced router's 256 tokens, inside the
    call's range, and the prediction says the stand-in ran them."""
    if installer.installed() is None:
        pytest.skip(f"grouped_gemm is not installed ({installer.install_command()}; scripts/setup installs it)")
    out = tmp_path / "run"
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "grouped_gemm_moe.py")])
    assert r.exit_code == 0, r.output
    printed = json.loads(next(line for line in r.output.splitlines() if line.startswith("{")))
    assert printed["sizes"] == [256] * 4 and printed["hidden"] == [1024, 256] and printed["out"] == [512, 256]
    assert printed["grads"] == [[4, 256, 512], [4, 512, 256], [4, 256]]

    from maya.simulator.trace import load

    ops = load(out).ranks[0].ops
    names = dict(zip(ops["op_id"], ops["name"]))
    parents = ops["parent_op_id"].map(names)
    calls = ops["name"][ops["name"].str.startswith("grouped_gemm::")].value_counts().to_dict()
    fork = printed["fork"]
    # per step: 2 forward gmm, the second's input gradient, both weight gradients (the layer's input needs none)
    assert calls == {
        "grouped_gemm::gmm": 10,
        **({f"grouped_gemm::{c}": 2 for c in ("permute", "unpermute", "unpermute_bwd")} if fork else {}),
    }
    gemms = ops[(ops["name"] == "aten::mm") & (parents == "grouped_gemm::gmm").to_numpy()]
    assert len(gemms) == 40  # 5 calls x 4 experts x 2 steps
    assert {tuple(map(tuple, s[:2])) for s in gemms["input_shapes"]} >= {
        ((256, 256), (256, 512)),
        ((256, 512), (512, 256)),
    }
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    notes = " ".join(json.loads(predicted.stdout)["notes"])
    assert f"{sum(calls.values())} grouped_gemm call(s)" in notes and "one cuBLAS GEMM per expert" in notes
