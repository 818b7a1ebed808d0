"""The reference workloads (data/workloads): GPT sizes match their names, Llama's grouped-query
attention has the right shapes, and the suite's configs are valid and chosen as data/workloads/README.md
says (estimates checked against the models' real parameter counts)."""

import importlib
import runpy

import pytest
import torch
from paths import SHIPPED_WORKLOADS

from maya.profiler.workloads.suite import load_suite

WORKLOADS = SHIPPED_WORKLOADS


@pytest.fixture(scope="module")
def suite_ns() -> dict:
    return runpy.run_path(str(WORKLOADS / "suite.py"))  # puts data/workloads on sys.path, as scripts expect


@pytest.fixture(scope="module")
def gpt(suite_ns):
    return importlib.import_module("gpt")


@pytest.fixture(scope="module")
def llama(suite_ns):
    return importlib.import_module("llama")


def parameters(module, argv: list[str]) -> int:
    with torch.device("meta"):  # shapes only: 2.7B parameters cost no memory
        model = module.build(module.parse_args(argv))
    return sum(p.numel() for p in model.parameters())


def nominal(size: str) -> float:
    return float(size[:-1]) * (1e6 if size.endswith("m") else 1e9)


@pytest.mark.parametrize("size", ["125m", "350m", "760m", "1.3b", "2.7b"])
def test_gpt_sizes_match_their_names(gpt, suite_ns, size):
    count = parameters(gpt, ["--size", size, "--seq", "2048"])
    assert abs(count / nominal(size) - 1) < 0.10
    assert suite_ns["parameter_count"]("gpt", size, 2048) == count


@pytest.mark.parametrize("size, published", [("125m", 125e6), ("1b", 1.24e9), ("3b", 3.21e9)])
def test_llama_sizes(llama, suite_ns, size, published):
    count = parameters(llama, ["--size", size, "--seq", "2048"])
    assert abs(count / published - 1) < 0.01
    assert suite_ns["parameter_count"]("llama", size, 2048) == count


def test_llama_grouped_query_attention_shapes(llama):
    args = llama.parse_args(
        [
            "--layers",
            "2",
            "--dim",
            "64",
            "--heads",
            "8",
            "--kv-heads",
            "2",
            "--ffn",
            "96",
            "--vocab",
            "50",
            "--seq",
            "12",
        ]
    )
    model = llama.build(args)
    attn = model.blocks[0].attn
    assert attn.q_proj.weight.shape == (64, 64) and attn.o_proj.weight.shape == (64, 64)
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (2 * 8, 64)  # 2 key/value heads of 8
    x = torch.randn(3, 12, 64)
    q, k, v = attn.project(x)
    assert q.shape == (3, 8, 12, 8) and k.shape == v.shape == (3, 2, 12, 8)
    assert attn(x).shape == (3, 12, 64) and model(torch.randint(0, 50, (3, 12))).shape == (3, 12, 50)
    # query heads 0-3 read key/value head 0 and heads 4-7 head 1: changing head 1's values changes
    # only the attention output (o_proj's input) of query heads 4-7
    seen = []
    attn.o_proj.register_forward_hook(lambda _, inputs, __: seen.append(inputs[0].detach().clone()))
    with torch.no_grad():
        attn(x)
        attn.v_proj.weight[8:] += 1.0
        attn(x)
    before, after = (t.view(3, 12, 8, 8) for t in seen)
    torch.testing.assert_close(after[:, :, :4], before[:, :, :4])
    assert not torch.allclose(after[:, :, 4:], before[:, :, 4:])
    with pytest.raises(ValueError, match="do not split"):
        llama.Llama(vocab=10, dim=48, heads=6, kv_heads=4, ffn=8, layers=1, seq=4)


def test_suite_configs_are_valid_and_fit_the_plan(suite_ns, gpt, llama):
    configs = load_suite(WORKLOADS / "suite.py")
    assert len(configs) >= 30
    scripts = {"gpt.py": gpt, "llama.py": llama}
    for c in configs:
        args = scripts[c.script.name].parse_args(list(c.args))  # every config's arguments parse
        assert 1024 <= args.seq <= 4096 and 1 <= args.batch <= 16
        assert c.attrs["expect"] == ("oom" if c.attrs["estimate_gib"] > suite_ns["H100_GIB"] else "ok")
        assert c.estimate_s < 30  # a process start, a trace conversion and 20 iterations
    ooms = [c for c in configs if c.attrs["expect"] == "oom"]
    assert any(c.attrs["estimate_gib"] < 1.2 * suite_ns["H100_GIB"] and "fp32" in c.name for c in ooms)
    assert sum(c.estimate_s for c in configs) < 20 * 60
    variety = {(c.script.name, "--bf16" in c.args, "--checkpoint" in c.args) for c in configs}
    assert variety >= {
        ("gpt.py", True, False),
        ("gpt.py", False, False),
        ("gpt.py", True, True),
        ("llama.py", True, False),
        ("llama.py", False, False),
        ("llama.py", True, True),
    }
    sizes = {scripts[c.script.name].parse_args(list(c.args)).size for c in configs if c.script.name == "gpt.py"}
    assert sizes == set(gpt.SIZES)
