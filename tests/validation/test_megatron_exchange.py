"""Megatron-LM's 2022 pipeline exchange: which korthikanti2022 rows run it, and its patch applied to a cached copy of
the checkout (once, whole or not at all, never to the user's checkout)."""

import json
import os
import py_compile
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from maya.core import settings
from maya.installer import transformer_engine
from maya.validation import load_suite, megatron, megatron_exchange

STAND_IN_PATCH = """\
diff --git a/megatron/core/p2p.py b/megatron/core/p2p.py
index {blob}..0123456789 100644
--- a/megatron/core/p2p.py
+++ b/megatron/core/p2p.py
@@ -1,2 +1,2 @@
 def send(tensor):
-    return tensor
+    return tensor.chunk()
"""
STAND_IN_P2P = "def send(tensor):\n    return tensor\n"


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
    """A stand-in checkout (entry point, a `.git`, a data folder, one package file), a patch written for that file
    (its blob named as git names it), and `$MAYA_HOME`."""
    checkout = tmp_path / "Megatron-LM"
    (checkout / "megatron" / "core").mkdir(parents=True)
    (checkout / ".git").mkdir()
    (checkout / "data").mkdir()
    (checkout / "data" / "shard.bin").write_bytes(b"\0" * 64)
    (checkout / "pretrain_gpt.py").write_text("print('pretrain')\n")
    (checkout / ".python-version").write_text("3.12\n")
    p2p = checkout / "megatron" / "core" / "p2p.py"
    p2p.write_text(STAND_IN_P2P)
    blob = subprocess.run(["git", "hash-object", str(p2p)], capture_output=True, text=True, check=True).stdout
    patch = tmp_path / "exchange.patch"
    patch.write_text(STAND_IN_PATCH.format(blob=blob.strip()[:10]))
    monkeypatch.setattr(megatron_exchange, "PATCH", patch)
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    return checkout


def test_the_patch_goes_to_a_cached_copy_once(stand_in, monkeypatch):
    byte_code = stand_in / "megatron" / "core" / "__pycache__" / "p2p.cpython-311.pyc"
    byte_code.parent.mkdir()
    byte_code.write_bytes(b"byte code")
    copy = megatron_exchange.patched(stand_in)
    assert copy.parent == settings.home() / "megatron-lm" / "patched"
    assert (copy / "megatron" / "core" / "p2p.py").read_text().endswith("return tensor.chunk()\n")
    assert (stand_in / "megatron" / "core" / "p2p.py").read_text().endswith("return tensor\n")  # untouched
    assert (copy / "pretrain_gpt.py").is_file() and not (copy / ".git").exists()
    assert not (copy / "data").exists()  # only what the key covers: megatron/ and the top-level files
    assert (copy / ".python-version").read_text() == "3.12\n"  # pyenv's choice of python3-config, as in the checkout
    assert not (copy / "megatron" / "core" / "__pycache__").exists()
    assert [p.name for p in copy.parent.iterdir() if p.name.endswith(".partial")] == []

    def no_copy(*args, **kwargs):
        raise AssertionError("copied again")

    monkeypatch.setattr(megatron_exchange.shutil, "copy2", no_copy)
    assert megatron_exchange.patched(stand_in) == copy  # the same checkout and patch: the copy is reused
    (stand_in / "data" / "shard.bin").write_bytes(b"\1" * 64)
    byte_code.write_bytes(b"other byte code")
    assert megatron_exchange.patched(stand_in) == copy  # neither data nor byte code is in the copy or its key


@pytest.mark.parametrize(
    "edit",
    [Path("pretrain_gpt.py"), Path("megatron/core/datasets/Makefile"), Path(".python-version")],
    ids=["entry point", "not python", "top-level file"],
)
def test_a_changed_checkout_gets_its_own_copy_and_the_old_one_goes(stand_in, edit):
    old = megatron_exchange.patched(stand_in)
    stale = old.with_name(f".{old.name[:-4]}dead.partial")  # a killed maker's leftovers of another content
    stale.mkdir()
    (stand_in / edit).parent.mkdir(parents=True, exist_ok=True)
    (stand_in / edit).write_text("changed\n")
    new = megatron_exchange.patched(stand_in)
    assert new != old and (new / edit).read_text() == "changed\n"
    assert [p.name for p in new.parent.iterdir() if p.is_dir()] == [new.name]  # the old copy and the partial gone


def test_another_checkout_of_the_same_name_keeps_its_copy(stand_in, tmp_path):
    other = tmp_path / "elsewhere" / stand_in.name
    shutil.copytree(stand_in, other)
    (other / "pretrain_gpt.py").write_text("print('another')\n")
    first, second = megatron_exchange.patched(stand_in), megatron_exchange.patched(other)
    assert first.is_dir() and second.is_dir() and first != second


def test_a_patch_that_does_not_apply_is_named_and_leaves_no_copy(stand_in):
    (stand_in / "megatron" / "core" / "p2p.py").write_text("def send(tensor, group):\n    return tensor\n")
    assert not megatron_exchange.fits(stand_in)  # not the file the patch was written for
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


def test_a_checkout_the_patch_was_not_written_for_runs_stock_and_says_so(stand_in, monkeypatch):
    """Another megatron-core's p2p file (here one changed line): decided by its blob before any copy is tried."""
    monkeypatch.setenv("MAYA_MEGATRON_LM", str(stand_in))
    monkeypatch.setattr(transformer_engine, "installed", lambda: True)
    (stand_in / "megatron" / "core" / "p2p.py").write_text(STAND_IN_P2P + "# another release\n")
    full = megatron.plan(2, load_suite("korthikanti2022").table.loc[2])
    assert full.script == stand_in / "pretrain_gpt.py"
    assert full.assumptions == (megatron.TE_ASSUMPTION, megatron_exchange.NOT_APPLIED)
    assert "differs from core_r0.19.0's" in megatron_exchange.NOT_APPLIED
    assert not (settings.home() / "megatron-lm" / "patched").exists()  # no copy made


def test_the_shipped_patch_applies_to_the_checkout(tmp_path, monkeypatch):
    """The real patch on `MAYA_MEGATRON_LM` (megatron-core 0.19's p2p_communication.py): it applies and compiles."""
    checkout = Path(settings.MEGATRON_LM.get() or "")
    if not (checkout / "pretrain_gpt.py").is_file():
        pytest.skip("set MAYA_MEGATRON_LM to a Megatron-LM core_r0.19.0 checkout")
    monkeypatch.setenv("MAYA_HOME", str(tmp_path))
    assert megatron_exchange.fits(checkout)
    copy = megatron_exchange.patched(checkout)
    p2p = copy / "megatron" / "core" / "pipeline_parallel" / "p2p_communication.py"
    py_compile.compile(str(p2p), cfile=str(tmp_path / "p2p.pyc"), doraise=True)
    text = p2p.read_text()
    assert "split_tensor_into_1d_equal_chunks" in text and "all_gather_into_tensor" in text


def _installed_core_019() -> Path:
    """site-packages' `megatron/core` when the installed megatron-core is 0.19; a skip naming the version otherwise."""
    try:
        version = metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        pytest.skip("megatron-core is not installed; the patch is for 0.19")
    if not version.startswith("0.19."):
        pytest.skip(f"megatron-core {version} is installed; the patch is for 0.19")
    return Path(str(metadata.distribution("megatron-core").locate_file("megatron/core")))


@pytest.fixture
def installed_checkout(tmp_path, monkeypatch):
    """The installed megatron-core 0.19 laid out as a checkout (`megatron/core`, a stand-in entry point), without
    `MAYA_MEGATRON_LM`."""
    checkout = tmp_path / "checkout"
    shutil.copytree(_installed_core_019(), checkout / "megatron" / "core", ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "pretrain_gpt.py").write_text("")
    monkeypatch.delenv("MAYA_MEGATRON_LM", raising=False)
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    return checkout


def test_the_shipped_patch_applies_to_the_installed_megatron_core(installed_checkout, tmp_path):
    assert megatron_exchange.fits(installed_checkout)  # 0.19.x ships core_r0.19.0's p2p_communication.py
    copy = megatron_exchange.patched(installed_checkout)
    p2p = copy / "megatron" / "core" / "pipeline_parallel" / "p2p_communication.py"
    py_compile.compile(str(p2p), cfile=str(tmp_path / "p2p.pyc"), doraise=True)
    assert "split_tensor_into_1d_equal_chunks" in p2p.read_text()


@pytest.mark.slow
def test_the_patched_exchange_is_exact_and_scatters_only_where_it_should(installed_checkout):
    """TP 2 x PP 2 over gloo on CPU (`megatron_p2p_gloo.py`, ~1 min on 2 cores): every received tensor is exact; one
    all-gather a receive where the element count divides by TP, none with sequence parallelism, TP 1, an element
    count TP does not divide, or a pipeline group that is not parallel_state's."""
    copy = megatron_exchange.patched(installed_checkout)
    script = Path(__file__).with_name("megatron_p2p_gloo.py")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", str(script)],
        cwd=copy,
        env={**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 4 * 7 and all(line["exact"] for line in lines)
    gathers = {line["case"]: set() for line in lines}
    for line in lines:
        gathers[line["case"]].add(line["gathers"])
    assert gathers == {
        "divisible": {1},
        "divisible, one operation at a time": {1},
        "divisible, overlapped": {1},
        "not divisible by TP": {0},
        "sequence parallel": {0},
        "TP 1 in the config": {0},
        "another pipeline group": {0},
    }
