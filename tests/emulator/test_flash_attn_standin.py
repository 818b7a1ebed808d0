"""Maya's stand-in for flash-attn's CUDA extension (`emulator/standins/flash_attn_2_cuda.py`): flash-attn's own
Python code runs in an emulated rank, its calls on torch's FlashAttention-2 port."""

import importlib
import importlib.metadata
import json
import sys

import pandas as pd
import pytest
import torch
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.runner import STANDINS
from maya.installer import flash_attn as installer
from maya.simulator.attention_shapes import op_attention_shapes

runner = CliRunner()
NAME = "flash_attn_2_cuda"


def _imported(monkeypatch, version: str):
    """The stand-in module, imported as a rank imports it (last on the path), as if flash-attn `version` were
    installed."""
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: version if n == "flash_attn" else real(n))
    return importlib.import_module(NAME)


@pytest.fixture
def standin(monkeypatch):
    """The stand-in as if flash-attn 2.8.3 were installed."""
    yield _imported(monkeypatch, "2.8.3.post2")
    sys.modules.pop(NAME, None)


@pytest.mark.parametrize(
    "version, said", [(None, "flash-attn is not installed"), ("2.5.9.post1", "flash-attn 2.5.9.post1 is")]
)
def test_a_flash_attn_it_does_not_speak_fails_the_import_naming_it(monkeypatch, version, said):
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.delitem(sys.modules, NAME, raising=False)

    def installed(name):
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", installed)
    with pytest.raises(ImportError, match=said):
        importlib.import_module(NAME)
    sys.modules.pop(NAME, None)


def test_what_torchs_port_cannot_do_fails_loudly_naming_it(standin):
    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match=r"fwd with ALiBi slopes"):
        standin.fwd(q, q, q, None, torch.ones(2), 0.0, 0.25, True, -1, -1, 0.0, False, None)
    with pytest.raises(NotImplementedError, match=r"fwd with soft-capping"):
        standin.fwd(q, q, q, None, None, 0.0, 0.25, True, -1, -1, 30.0, False, None)
    with pytest.raises(NotImplementedError, match=r"fwd_kvcache \(attention over a KV cache"):
        standin.fwd_kvcache(q, q, q)
    with pytest.raises(AttributeError, match=r"flash_attn_2_cuda.fwd_block is not implemented"):
        standin.fwd_block  # noqa: B018


@pytest.mark.parametrize("version, returned", [("2.6.3", 8), ("2.7.4.post1", 4)])
def test_a_forward_call_returns_what_the_installed_releases_extension_returns(monkeypatch, version, returned):
    """flash-attn 2.6's `fwd` and `varlen_fwd` also return the q, k, v and output its kernel used (out, q, k, v,
    out_padded, softmax_lse, S_dmask, rng_state); 2.7 on return out, softmax_lse, S_dmask, rng_state. 2.6 pads a
    head dimension that is not a multiple of 8 in its extension (and its backward's dout), and so does the stand-in."""
    standin = _imported(monkeypatch, version)
    try:
        meta = {"device": "meta", "dtype": torch.bfloat16}
        q, kv = torch.empty(2, 256, 4, 64, **meta), torch.empty(2, 256, 2, 64, **meta)
        got = standin.fwd(q, kv, kv, None, None, 0.0, 0.125, True, -1, -1, 0.0, False, None)
        tq, tkv = torch.empty(512, 4, 64, **meta), torch.empty(512, 2, 64, **meta)
        bounds = torch.empty(4, dtype=torch.int32, device="meta")
        packed = standin.varlen_fwd(
            tq, tkv, tkv, None, bounds, bounds, None, None, None, None, 256, 256, 0.0, 0.125, False, True, -1, -1, 0.0,
            False, None,
        )  # fmt: skip
        assert len(got) == len(packed) == returned
        if returned == 8:
            assert got[1] is q and got[2] is kv and got[3] is kv and got[4] is got[0]
            assert packed[1] is tq and packed[4] is packed[0]
        lse, rng = got[-3], got[-1]
        assert lse.shape == (2, 4, 256) and rng.dtype == torch.int64
        if returned == 8:  # 2.6 pads a head dimension of 60 to 64 as its extension does, and its backward's dout
            odd = torch.empty(2, 256, 4, 60, **meta)
            out, qp, kp, vp, padded = standin.fwd(
                odd, odd, odd, None, None, 0.0, 0.125, True, -1, -1, 0.0, False, None
            )[:5]
            assert out.shape[-1] == 60 and qp.shape[-1] == kp.shape[-1] == vp.shape[-1] == padded.shape[-1] == 64
            grads = standin.bwd(
                out, qp, kp, vp, padded, got[-3].new_empty(2, 4, 256), torch.empty_like(qp), torch.empty_like(kp),
                torch.empty_like(vp), None, 0.0, 0.125, True, -1, -1, 0.0, False, None, None,
            )  # fmt: skip
            assert [g.shape[-1] for g in grads[:3]] == [60, 60, 60]  # views of the padded buffers, as 2.6 returns
    finally:
        sys.modules.pop(NAME, None)


def test_results_land_in_the_callers_buffers_as_flash_attns_kernel_writes_them(standin):
    """A buffer of its own takes the result's storage (no copy); a view of a larger buffer gets a copy."""
    result = torch.arange(6.0).view(2, 3)
    own = torch.empty(2, 3)
    assert standin._into(own, result) is own and own.data_ptr() == result.data_ptr()
    packed = torch.zeros(2, 3, 3)
    view = packed[:, :, 1]
    assert standin._into(view, result) is view and torch.equal(packed[:, :, 1], result)
    assert standin._into(None, result) is result


def _described(tensors) -> list:
    return [(tuple(t.shape), t.dtype) for t in tensors]


@pytest.mark.slow  # ~0.7 s: flash-attn's import
def test_each_call_answers_as_flash_attns_own_fake_functions_declare(standin):
    """On meta tensors (torch's port has meta kernels), every call returns the shapes and dtypes flash-attn's
    `torch.library` fakes declare: what `torch.compile` checks the real calls against."""
    if installer.installed() is None:
        pytest.skip(f"flash-attn is not installed ({installer.install_command()})")
    from flash_attn import flash_attn_interface as fa

    meta = {"device": "meta", "dtype": torch.bfloat16}
    q, kv = torch.empty(2, 256, 4, 64, **meta), torch.empty(2, 256, 2, 64, **meta)
    got = standin.fwd(q, kv, kv, None, None, 0.1, 0.125, True, -1, -1, 0.0, False, None)
    assert _described(got) == _described(
        fa._flash_attn_forward_fake(q, kv, kv, 0.1, 0.125, True, -1, -1, 0.0, None, False)
    )
    out, lse, _, rng = got
    grads = standin.bwd(
        out, q, kv, kv, out, lse, None, None, None, None, 0.1, 0.125, True, -1, -1, 0.0, False, None, rng
    )
    assert _described(grads[:3]) == _described((q, kv, kv))
    args = (out, q, kv, kv, out, lse, None, None, None, 0.1, 0.125, True, -1, -1, 0.0, None, False, rng)
    assert _described(grads[3:]) == _described([fa._flash_attn_backward_fake(*args)])

    tq, tkv = torch.empty(512, 4, 64, **meta), torch.empty(512, 2, 64, **meta)
    bounds = torch.empty(4, dtype=torch.int32, device="meta")
    got = standin.varlen_fwd(
        tq, tkv, tkv, None, bounds, bounds, None, None, None, None, 256, 256, 0.0, 0.125, False, True, -1, -1, 0.0,
        False, None,
    )  # fmt: skip
    fake = fa._flash_attn_varlen_forward_fake(tq, tkv, tkv, bounds, bounds, 256, 256, 0.0, 0.125, True)
    assert _described(got[:2]) == _described(fake[:2])
    out, lse = got[:2]
    grads = standin.varlen_bwd(
        out, tq, tkv, tkv, out, lse, None, None, None, bounds, bounds, None, 256, 256, 0.0, 0.125, False, True, -1, -1,
        0.0, False, None, None,
    )  # fmt: skip
    assert _described(grads[:3]) == _described((tq, tkv, tkv))
    args = (out, tq, tkv, tkv, out, lse, None, None, None, bounds, bounds, 256, 256, 0.0, 0.125, True, -1, -1, 0.0)
    assert _described(grads[3:]) == _described([fa._flash_attn_varlen_backward_fake(*args, None, False)])


def test_only_a_buffer_that_alone_holds_its_memory_takes_a_results_storage(standin):
    own = torch.empty(4, 3)
    assert standin._own(own)
    alias = own.detach()  # an alias Inductor's reinterpret_tensor also makes: the same storage, no `_base`
    assert not standin._own(own) and not standin._own(alias)
    packed = torch.empty(4, 3, 3)
    reinterpreted = torch.empty(0).set_(packed.untyped_storage(), 0, (4, 3), (9, 3))  # Inductor's, at offset 0
    assert not standin._own(packed[:, :, 1]) and reinterpreted._base is None and not standin._own(reinterpreted)


@pytest.mark.slow  # ~2.5 s: torch's switch imports Inductor's settings
def test_deterministic_holds_for_its_call_alone_without_filling_new_memory(standin):
    import torch.utils.deterministic as switches

    assert not torch.are_deterministic_algorithms_enabled()
    with standin._deterministic(True):
        assert torch.are_deterministic_algorithms_enabled() and not switches.fill_uninitialized_memory
    assert not torch.are_deterministic_algorithms_enabled() and switches.fill_uninitialized_memory


def test_packed_sequences_are_priced_at_their_mean_length():
    """A variable-length call ([tokens, heads, head dim] with sequence bounds): batch x heads and the mean length."""
    bounds = [4]  # 3 sequences
    ops = pd.DataFrame(
        {
            "op_id": [1, 2, 3],
            "name": [
                "aten::_flash_attention_forward",
                "aten::_flash_attention_backward",
                "aten::_flash_attention_forward",
            ],
            "input_shapes": [
                [[512, 8, 64], [512, 2, 64], [512, 2, 64], bounds, bounds],
                [[512, 8, 64], [512, 8, 64], [512, 2, 64], [512, 2, 64], [512, 8, 64], [8, 512], bounds, bounds],
                [[2, 256, 8, 64], [2, 256, 2, 64], [2, 256, 2, 64], None, None],  # dense: no bounds
            ],
            "input_dtypes": [["BFloat16"] * 5, ["BFloat16"] * 8, ["BFloat16"] * 5],
        }
    )
    shapes = op_attention_shapes(ops)
    assert shapes.loc[1, ["batch", "m", "n", "k"]].tolist() == pytest.approx([24.0, 512 / 3, 512 / 3, 64.0])
    assert shapes.loc[2, ["batch", "m", "n", "k", "backward"]].tolist() == pytest.approx(
        [24.0, 512 / 3, 512 / 3, 64.0, True]
    )
    assert shapes.loc[3, ["batch", "m", "n", "k"]].tolist() == [16.0, 256.0, 256.0, 64.0]


def test_a_capture_failing_on_a_missing_flash_attn_says_how_to_install_it():
    for reason in (
        "rank 0: ModuleNotFoundError: No module named 'flash_attn'",
        "rank 0: ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
        "the package flash_attn seems to be not installed.",
    ):
        assert installer.install_command() in installer.missing_hint(reason)
    assert installer.missing_hint("rank 0: ModuleNotFoundError: No module named 'flash'") is None


@pytest.mark.slow  # an emulation: ~10 s, ~20 s compiled
@pytest.mark.parametrize("compiled", [False, True])
def test_flash_attns_calls_run_unchanged_and_are_priced_as_flashattention_2(tmp_path, compiled):
    """flash-attn 2.8's own Python code (dense, variable-length, packed with dropout; forward and backward), eager
    or under `torch.compile`, runs in a rank; each call is torch's port inside flash-attn's op, priced as
    FlashAttention-2 with its shape, and the prediction says the stand-in ran it."""
    if installer.installed() is None:
        pytest.skip(f"flash-attn is not installed ({installer.install_command()}; scripts/setup installs it)")
    out = tmp_path / "run"
    script = [str(WORKLOADS / "flash_attn_calls.py"), *(["--compile"] if compiled else [])]
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "python", *script])
    assert r.exit_code == 0, r.output
    printed = json.loads(next(line for line in r.output.splitlines() if line.startswith("{")))
    assert printed == {"outputs": [[2, 256, 4, 64], [512, 4, 64], [2, 256, 4, 64]], "grad": [768, 256]}

    from maya.simulator.opcodes import classify
    from maya.simulator.trace import load
    from maya.simulator.work import work_frame

    trace = load(out).ranks[0]
    ops = trace.ops
    names = dict(zip(ops["op_id"], ops["name"]))
    parents = ops["parent_op_id"].map(names)
    torchs = ops[ops["name"].str.startswith("aten::_flash_attention_")]
    grandparents = ops["parent_op_id"].map(dict(zip(ops["op_id"], ops["parent_op_id"]))).map(names)
    assert len(torchs) == 12 and parents[torchs.index].str.startswith("flash_attn_2_cuda::").all()  # 3 calls x 2 x 2
    assert grandparents[torchs.index].str.startswith("flash_attn::").all()  # the stand-in's range in flash-attn's op
    copies = ops[(ops["name"] == "aten::copy_") & parents.str.startswith("flash_attn_2_cuda::").to_numpy()]
    assert len(copies) == 6  # the qkv-packed gradients share one buffer (views; compiled: Inductor's reinterpretations)
    frames = work_frame(trace, classify(trace.calls))
    attention = frames[frames["family"] == "attention"]
    assert not attention["op"].str.startswith("torchflash").any()  # the package's calls, priced as the package
    fused = attention[attention["op"].str.match(r"flash_(fwd|bwd)(_causal)?$")]
    shapes = set(map(tuple, fused[["op", "batch", "m", "n", "k"]].drop_duplicates().to_numpy().tolist()))
    assert shapes == {
        ("flash_fwd_causal", 8.0, 256.0, 256.0, 64.0),  # dense: 2 sequences x 4 heads
        ("flash_bwd_causal", 8.0, 256.0, 256.0, 64.0),
        ("flash_fwd_causal", 12.0, 512 / 3, 512 / 3, 64.0),  # packed: 3 sequences at their mean length
        ("flash_bwd_causal", 12.0, 512 / 3, 512 / 3, 64.0),
        ("flash_fwd", 8.0, 256.0, 256.0, 64.0),  # qkv-packed with dropout, not causal
        ("flash_bwd", 8.0, 256.0, 256.0, 64.0),
    }
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    notes = " ".join(json.loads(predicted.stdout)["notes"])
    assert "12 flash-attn call(s) ran on Maya's stand-in for its CUDA extension" in notes
    assert "6 gradient(s) into buffers that share their memory (the packed variants' views) were copied" in notes
    assert "4 variable-length call(s) are priced at their sequences' mean length" in notes


@pytest.mark.slow  # an emulation: ~15 s
def test_transformers_flash_attention_2_runs_dense_and_unpadded_calls(tmp_path):
    """transformers' `attn_implementation="flash_attention_2"` finds flash-attn usable in a rank; a batch with a padded
    row is unpadded into flash-attn's variable-length call (456 tokens: 2 sequences of 228 on average)."""
    if installer.installed() is None:
        pytest.skip(f"flash-attn is not installed ({installer.install_command()}; scripts/setup installs it)")
    out = tmp_path / "run"
    script = [str(WORKLOADS / "hf_llama.py"), "--attn", "flash_attention_2", "--padded"]
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "python", *script])
    assert r.exit_code == 0, r.output
    from maya.simulator.trace import load

    ops = load(out).ranks[0].ops
    called = ops["name"].value_counts()
    assert called["flash_attn::_flash_attn_forward"] == 2 and called["flash_attn::_flash_attn_varlen_forward"] == 2
    assert called["flash_attn::_flash_attn_backward"] == 2 and called["flash_attn::_flash_attn_varlen_backward"] == 2
    varlen = ops[ops["name"] == "aten::_flash_attention_forward"]["input_shapes"].map(lambda s: list(s[0]))
    assert [456, 8, 64] in varlen.tolist()
