"""Maya's stand-in for grouped_gemm's CUDA extension (`emulator/standins/grouped_gemm_backend.py`) and the installer
of grouped_gemm's Python code (`maya.installer.grouped_gemm`)."""

import importlib
import importlib.metadata
import json
import sys

import pytest
import torch
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.runner import STANDINS
from maya.installer import grouped_gemm as installer
from maya.installer import python_code
from maya.installer.grouped_gemm import GROUPED_GEMM

runner = CliRunner()


NAME = "grouped_gemm_backend"


def _imported(monkeypatch, distribution: str | None, version: str = ""):
    """The stand-in module, imported as a rank imports it (last on the path), as if `distribution` `version` were
    the installed grouped_gemm (None: none is)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    real = importlib.metadata.version

    def installed(name):
        if name in GROUPED_GEMM.distributions:
            if name != distribution:
                raise importlib.metadata.PackageNotFoundError(name)
            return version
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", installed)
    return importlib.import_module(NAME)


@pytest.fixture
def standin(monkeypatch):
    """The stand-in as if NVIDIA's fork from the registry were installed."""
    yield _imported(monkeypatch, "nv-grouped-gemm", "1.1.4.post8")
    sys.modules.pop(NAME, None)


@pytest.mark.parametrize(
    "distribution, version, streams",
    [("nv-grouped-gemm", "1.1.4.post8", 4), ("grouped_gemm", "1.1.4", 4), ("grouped_gemm", "0.3.0", 0)],
)
def test_gmm_runs_on_the_fork_s_four_side_streams_and_on_the_current_one_in_the_original(
    monkeypatch, distribution, version, streams
):
    """NVIDIA's fork (on the registry, or 1.x from its repository) spreads an expert's GEMMs over 4 side streams;
    Gale's original (0.x) runs them on the current stream."""
    try:
        assert _imported(monkeypatch, distribution, version).SIDE_STREAMS == streams
    finally:
        sys.modules.pop(NAME, None)


def test_without_grouped_gemm_installed_the_stand_in_fails_its_import_naming_it(monkeypatch):
    with pytest.raises(ImportError, match=r"grouped_gemm_backend: grouped_gemm is not installed"):
        _imported(monkeypatch, None)
    sys.modules.pop(NAME, None)


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
    padded = torch.cat([rows, torch.randn(2, 5, dtype=torch.float64)])  # rows no choice names change nothing
    torch.testing.assert_close(standin._unpermute_bwd(grad, padded, row_map, prob)[1], got_prob)


def test_with_one_choice_a_token_the_weights_are_not_applied_as_in_the_fork(standin):
    """The fork's top-1 kernels ignore the weights: unpermute is a gather, its backward's rows are unweighted and the
    weights' gradient is not computed."""
    x, indices = _routing(top_k=1)
    rows, row_map = standin._permute(x, indices, 0)
    torch.testing.assert_close(standin._unpermute(rows, row_map, None, 6, 1), x)
    grad = torch.randn(6, 5, dtype=torch.float64)
    got_rows, got_prob = standin._unpermute_bwd(grad, rows, row_map, torch.rand(6, 1, dtype=torch.float32))
    torch.testing.assert_close(got_rows, grad.index_select(0, torch.argsort(indices.flatten(), stable=True)))
    assert got_prob.shape == (6, 1) and got_prob.dtype == torch.float32


def test_the_first_permute_makes_the_forks_sort_buffers(standin):
    """Sorted keys, row ids, sorted row ids (int32) and the sort's scratch, for the most choices to come."""
    made = standin._workspace(12, torch.device("cpu"))
    assert [(t.dtype, t.numel()) for t in made] == [(torch.int32, 12)] * 3 + [(torch.int8, 96)]
    assert torch.equal(made[1], torch.arange(12, dtype=torch.int32))


def test_calls_the_extension_would_refuse_or_maya_cannot_answer_fail_naming_themselves(standin):
    a = torch.zeros(4, 2, dtype=torch.bfloat16)
    meta = {"device": "meta", "dtype": torch.bfloat16}
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.gmm: batch_sizes must be a host tensor"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64, device="meta"), False, False)
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.gmm: a must be a 2-d device tensor"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64), False, False)
    m = torch.empty(8, 4, dtype=torch.bfloat16, device="meta")
    with pytest.raises(RuntimeError, match=r"gmm: c must be \[a's rows, b's output size\]"):
        standin.gmm(m, torch.empty(2, 4, 6, **meta), torch.empty(8, 5, **meta), torch.tensor([3, 5]), False, False)
    with pytest.raises(RuntimeError, match=r"gmm: batch_sizes add up to more rows than a has"):
        standin.gmm(m, torch.empty(8, 6, **meta), torch.empty(2, 4, 6, **meta), torch.tensor([3, 6]), True, False)
    with pytest.raises(RuntimeError, match=r"gmm: trans_a and trans_b cannot both be set"):
        standin.gmm(a, a, a, torch.ones(2, dtype=torch.int64), True, True)
    with pytest.raises(RuntimeError, match=r"grouped_gemm_backend\.permute: the input must be a 2-d device tensor"):
        standin.permute(a, torch.zeros(4, 1, dtype=torch.int32), 0, [], 4)
    x, ids = torch.empty(4, 8, **meta), torch.empty(4, 2, dtype=torch.int32, device="meta")
    with pytest.raises(RuntimeError, match=r"permute: num_out_tokens above tokens x top-k .* not implemented by Maya"):
        standin.permute(x, ids, 9, [], 8)
    with pytest.raises(RuntimeError, match=r"unpermute: row_id_map must hold tokens x top-k entries"):
        standin.unpermute(x, torch.empty(6, dtype=torch.int32), torch.empty(0), 4, 2)
    with pytest.raises(RuntimeError, match=r"unpermute_bwd: top-k above 128 is not supported"):
        standin.unpermute_bwd(x, x, torch.empty(4 * 129, dtype=torch.int32), torch.empty(4, 129))
    with pytest.raises(RuntimeError, match=r"permute: wrong activation tensor type torch.int64"):
        standin.permute(torch.empty(4, 8, dtype=torch.int64, device="meta"), ids, 0, [], 8)
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


def _checkout(root, setup: str, init: str = "import grouped_gemm.ops\n"):
    """A source folder as a release lays it out: setup.py, grouped_gemm/ with a test module, csrc/, LICENSE."""
    (root / "grouped_gemm").mkdir(parents=True)
    (root / "grouped_gemm" / "__init__.py").write_text(init)
    (root / "grouped_gemm" / "ops_test.py").write_text("")
    (root / "csrc").mkdir()
    (root / "LICENSE").write_text("Apache License 2.0\n")
    (root / "setup.py").write_text(setup)
    return root


def test_the_installer_takes_the_packages_python_code_alone_under_its_name_and_version(tmp_path):
    tree = _checkout(
        tmp_path / "checkout", 'setup(\n    name="grouped_gemm",\n    version="1.1.4",\n    ext_modules=e)\n'
    )
    assert python_code.source_tree(GROUPED_GEMM, str(tree), tmp_path) == tree
    project = python_code.python_project(GROUPED_GEMM, tree, tmp_path / "scratch")
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*")) == [
        "LICENSE", "grouped_gemm", "grouped_gemm/__init__.py", "pyproject.toml",
    ]  # fmt: skip
    meta = (project / "pyproject.toml").read_text()
    assert (
        'name = "grouped_gemm"' in meta
        and 'version = "1.1.4"' in meta
        and 'include = ["grouped_gemm", "grouped_gemm.*"]' in meta
    )
    with pytest.raises(python_code.SourceError, match=r"no grouped_gemm/__init__.py"):
        python_code.source_tree(GROUPED_GEMM, str(tmp_path / "scratch"), tmp_path)
    with pytest.raises(python_code.SourceError, match=r"nv-grouped-gemm>=1.1: not a folder; give NAME==VERSION"):
        python_code.source_tree(GROUPED_GEMM, "nv-grouped-gemm>=1.1", tmp_path)


def test_the_installer_reads_a_release_s_name_and_version_where_it_keeps_them(tmp_path):
    """A registry archive's PKG-INFO; the fork's main, whose setup.py reads `__version__`; none at all is refused."""
    sdist = _checkout(tmp_path / "sdist", "setup(version=get_package_version())\n")
    (sdist / "PKG-INFO").write_text("Metadata-Version: 2.2\nName: nv_grouped_gemm\nVersion: 1.1.4.post8\n")
    assert python_code.identity(GROUPED_GEMM, sdist) == ("nv_grouped_gemm", "1.1.4.post8")
    main = _checkout(tmp_path / "main", "setup(version=get_package_version())\n", '__version__ = "1.1.4.post8"\n')
    assert python_code.identity(GROUPED_GEMM, main) == ("grouped_gemm", "1.1.4.post8")
    bare = _checkout(tmp_path / "bare", "setup(name='grouped_gemm')\n")
    with pytest.raises(python_code.SourceError, match=r"no version in its setup.py or grouped_gemm/__init__.py"):
        python_code.identity(GROUPED_GEMM, bare)


@pytest.mark.parametrize(
    "url, split",
    [
        ("https://github.com/fanshiqing/grouped_gemm@v1.1.4", ("https://github.com/fanshiqing/grouped_gemm", "v1.1.4")),
        ("https://github.com/fanshiqing/grouped_gemm", ("https://github.com/fanshiqing/grouped_gemm", "")),
        ("ssh://git@github.com/fanshiqing/grouped_gemm", ("ssh://git@github.com/fanshiqing/grouped_gemm", "")),
        ("https://host/org/repo@release/v1", ("https://host/org/repo", "release/v1")),
        ("file:///mirror/repo@15721c6", ("file:///mirror/repo", "15721c6")),
    ],
)
def test_a_git_source_names_its_ref_after_the_at_that_ends_its_path(url, split):
    assert python_code.git_ref(url) == split


def test_a_git_source_that_cannot_be_fetched_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git
    with pytest.raises(python_code.SourceError, match=r"git\+https://example.invalid/repo@v1: git clone failed"):
        python_code.source_tree(GROUPED_GEMM, "git+https://example.invalid/repo@v1", tmp_path)


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

    trace = load(out).ranks[0]
    ops = trace.ops
    names = dict(zip(ops["op_id"], ops["name"]))
    parents = ops["parent_op_id"].map(names)
    ranges = ops["name"][ops["name"].str.startswith("grouped_gemm::")].value_counts().to_dict()
    fork = printed["fork"]
    # per step: 2 forward gmm, the second's input gradient, both weight gradients (the layer's input needs none)
    assert ranges == {
        "grouped_gemm::gmm": 10,
        **({f"grouped_gemm::{c}": 2 for c in ("permute", "unpermute", "unpermute_bwd")} if fork else {}),
    }
    gemms = ops[(ops["name"] == "aten::mm") & (parents == "grouped_gemm::gmm").to_numpy()]
    assert len(gemms) == 40  # 5 calls x 4 experts x 2 steps
    work = trace.calls[trace.calls["kernel_id"].notna() | trace.calls["gemm_m"].notna()]  # kernels and cuBLAS calls
    in_gmm = work["op_id"].isin(gemms["op_id"])
    side = set(work.loc[in_gmm, "stream_id"]) - set(work.loc[~in_gmm, "stream_id"])
    assert in_gmm.sum() == 40 and len(side) == (4 if fork else 0)  # the fork's side streams; the original's none
    assert {tuple(map(tuple, s[:2])) for s in gemms["input_shapes"]} >= {
        ((256, 256), (256, 512)),
        ((256, 512), (512, 256)),
    }
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    notes = " ".join(json.loads(predicted.stdout)["notes"])
    assert f"{sum(ranges.values())} grouped_gemm call(s)" in notes and "one cuBLAS GEMM per expert" in notes
