"""Megatron-LM's 2022 pipeline exchange: which korthikanti2022 rows run it, and its patch applied to a cached copy of
the checkout (once, whole or not at all, never to the user's checkout)."""

import py_compile
from pathlib import Path

import pytest

from maya.core import settings
from maya.installer import transformer_engine
from maya.validation import load_suite, megatron, megatron_exchange

STAND_IN_PATCH = """\
--- a/megatron/core/p2p.py
+++ b/megatron/core/p2p.py
@@ -1,2 +1,2 @@
 def send(tensor):
-    return tensor
+    return tensor.chunk()
"""


def test_the_full_rows_with_pipeline_stages_and_no_sequence_parallelism_run_it():
    table = load_suite("korthikanti2022").table
    assert [row for row, values in table.iterrows() if megatron_exchange.applies(values)] == [2, 4, 6]
    other = table.loc[2].copy()
    other["source"] = "a 2025 measurement on megatron-core"
    assert not megatron_exchange.applies(other)  # megatron-core sends the whole activation
    one_stage = table.loc[2].copy()
    one_stage["pipeline_model_parallel_size"] = float("nan")  # Megatron's default: one stage, nothing exchanged
    assert not megatron_exchange.applies(one_stage)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A stand-in checkout (entry point, a `.git`, one package file), a patch of it, and `$MAYA_HOME`."""
    checkout = tmp_path / "Megatron-LM"
    (checkout / "megatron" / "core").mkdir(parents=True)
    (checkout / ".git").mkdir()
    (checkout / "pretrain_gpt.py").write_text("print('pretrain')\n")
    (checkout / "megatron" / "core" / "p2p.py").write_text("def send(tensor):\n    return tensor\n")
    patch = tmp_path / "exchange.patch"
    patch.write_text(STAND_IN_PATCH)
    monkeypatch.setattr(megatron_exchange, "PATCH", patch)
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    return checkout


def test_the_patch_goes_to_a_cached_copy_once(stand_in, monkeypatch):
    copy = megatron_exchange.patched(stand_in)
    assert copy.parent == settings.home() / "megatron-lm" / "patched"
    assert (copy / "megatron" / "core" / "p2p.py").read_text().endswith("return tensor.chunk()\n")
    assert (stand_in / "megatron" / "core" / "p2p.py").read_text().endswith("return tensor\n")  # untouched
    assert (copy / "pretrain_gpt.py").is_file() and not (copy / ".git").exists()
    assert [p.name for p in copy.parent.iterdir() if p.name.endswith(".partial")] == []

    def no_copy(*args, **kwargs):
        raise AssertionError("copied again")

    copytree = megatron_exchange.shutil.copytree
    monkeypatch.setattr(megatron_exchange.shutil, "copytree", no_copy)
    assert megatron_exchange.patched(stand_in) == copy  # the same checkout and patch: the copy is reused
    monkeypatch.setattr(megatron_exchange.shutil, "copytree", copytree)
    (stand_in / "pretrain_gpt.py").write_text("print('pretrain, changed')\n")
    assert megatron_exchange.patched(stand_in) != copy  # a changed checkout gets its own copy


def test_a_patch_that_does_not_apply_is_named_and_leaves_no_copy(stand_in):
    (stand_in / "megatron" / "core" / "p2p.py").write_text("def send(tensor, group):\n    return tensor\n")
    with pytest.raises(ValueError, match="exchange.patch does not apply to the Megatron-LM checkout"):
        megatron_exchange.patched(stand_in)
    assert [p.name for p in (settings.home() / "megatron-lm" / "patched").iterdir() if p.is_dir()] == []


def test_row_2_plans_the_patched_copy_and_says_so(stand_in, monkeypatch):
    monkeypatch.setenv("MAYA_MEGATRON_LM", str(stand_in))
    monkeypatch.setattr(transformer_engine, "installed", lambda: True)
    table = load_suite("korthikanti2022").table
    full, selective = megatron.plan(2, table.loc[2]), megatron.plan(3, table.loc[3])
    assert full.script == megatron_exchange.patched(stand_in) / "pretrain_gpt.py"
    assert full.sources == full.script.parent / "megatron"  # the patched package is in the command hash
    assert full.assumptions == (megatron.TE_ASSUMPTION, megatron_exchange.ASSUMPTION)
    assert selective.script == stand_in / "pretrain_gpt.py" and selective.assumptions == (megatron.TE_ASSUMPTION,)


def test_the_shipped_patch_applies_to_the_checkout(tmp_path, monkeypatch):
    """The real patch on `MAYA_MEGATRON_LM` (megatron-core 0.19's p2p_communication.py): it applies and compiles."""
    checkout = Path(settings.MEGATRON_LM.get() or "")
    if not (checkout / "pretrain_gpt.py").is_file():
        pytest.skip("set MAYA_MEGATRON_LM to a Megatron-LM core_r0.19.0 checkout")
    monkeypatch.setenv("MAYA_HOME", str(tmp_path))
    copy = megatron_exchange.patched(checkout)
    p2p = copy / "megatron" / "core" / "pipeline_parallel" / "p2p_communication.py"
    py_compile.compile(str(p2p), cfile=str(tmp_path / "p2p.pyc"), doraise=True)
    text = p2p.read_text()
    assert "split_tensor_into_1d_equal_chunks" in text and "all_gather_into_tensor" in text
