"""Environment switches have one home (maya.core.settings): every variable read anywhere is one of its
switches, no module reads a MAYA_* variable past it, and ARCHITECTURE.md's table is generated from it."""

import re

import pytest
from paths import REPO, SRC, TESTS

from maya.core import settings
from maya.core.paths import maya_home, warehouse_path
from maya.emulator import mailbox

PY_READS = re.compile(
    r"""(?:environ\.get\(|environ\[|getenv\(|setenv\(|delenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|["']([A-Z][A-Z0-9_]*)["']\s+in\s+os\.environ|_ENV\s*=\s*["'](MAYA_\w+)["']"""
)
SHIPPED_SCRIPTS = SRC / "maya" / "data"
"""Training scripts and workloads shipped as data (published records, the example): what they read is theirs."""
TORCH_DISTRIBUTED = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}
"""torch.distributed's own variables (set per rank as torchrun does), which the emulator's rendezvous, barrier and
spawned workers read as PyTorch does: not switches of Maya."""
LAUNCHERS_OWN = {"CUDA_VISIBLE_DEVICES", "PYTHONPATH"}
"""Variables the launchers Maya reads a command of (`emulator/launch_commands.py`: DeepSpeed's runner turns
CUDA_VISIBLE_DEVICES into `--include` and puts the working directory on PYTHONPATH) read themselves: read as they
read them, not switches of Maya."""
C_READS = re.compile(r'getenv\("(\w+)"\)')
SHELL_READS = re.compile(r"\$\{?(MAYA_\w+)")
TEST_OWN = "MAYA_TEST_"
"""Variables a test sets for its own workload script (tests/workloads/), not switches of Maya."""


def names_read() -> dict[str, str]:
    """Every environment variable name read (or set by a test) outside the settings module -> where: any name in
    Maya's own sources (`src/` less `SHIPPED_SCRIPTS`), `MAYA_*` ones in the benchmarks and tests."""
    found = {}
    for path in [*SRC.rglob("*.py"), *(REPO / "benchmarks").rglob("*.py"), *TESTS.rglob("*.py")]:
        if path.name != "settings.py":
            own = path.is_relative_to(SRC) and not path.is_relative_to(SHIPPED_SCRIPTS)
            for match in PY_READS.finditer(path.read_text()):
                name = next(filter(None, match.groups()))
                if own or name.startswith("MAYA_"):
                    found.setdefault(name, str(path.relative_to(REPO)))
    for path in (SRC / "maya" / "emulator" / "native").glob("*.[ch]*"):
        for name in C_READS.findall(path.read_text()):
            if name.startswith("MAYA_"):
                found.setdefault(name, str(path.relative_to(REPO)))
    for path in (REPO / "scripts").iterdir():
        if path.is_file():
            for name in SHELL_READS.findall(path.read_text()):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


@pytest.mark.slow
def test_every_variable_read_is_a_documented_switch():
    read = names_read()
    assert {"MAYA_EMU_LOOP_LIMIT", "MAYA_INSTALL", "MAYA_NANOGPT_REPO"} <= set(read)  # C, shell and Python seen
    assert TORCH_DISTRIBUTED <= set(read)  # and variables not Maya's, read in its sources
    switches = {s.name for s in settings.SWITCHES} | TORCH_DISTRIBUTED | LAUNCHERS_OWN
    undocumented = {
        name: where for name, where in read.items() if name not in switches and not name.startswith(TEST_OWN)
    }
    assert undocumented == {}


def test_no_module_reads_a_switch_past_the_settings_module():
    names = "|".join(["MAYA_", *(re.escape(s.name) + "[\"']" for s in settings.SWITCHES)])
    direct = re.compile(
        rf"""(?:environ\.get\(|environ\[|getenv\()\s*["'](?:{names})|["']MAYA_\w+["']\s+in\s+os\.environ"""
    )
    readers = [
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "settings.py" and direct.search(p.read_text())
    ]
    assert readers == []


def test_architecture_lists_the_switches_as_generated():
    assert settings.markdown() in (REPO / "ARCHITECTURE.md").read_text()


def test_switches_are_read_when_used_not_at_import(monkeypatch, tmp_path):
    monkeypatch.setenv("MAYA_HOME", str(tmp_path / "home"))
    assert maya_home() == tmp_path / "home"
    assert warehouse_path() == tmp_path / "home" / "warehouse.duckdb"
    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "w.duckdb"))
    assert warehouse_path() == tmp_path / "w.duckdb"
    assert settings.emulator_cache() != tmp_path / "home" / "emulator"  # conftest sets MAYA_EMULATOR_CACHE
    monkeypatch.delenv("MAYA_EMULATOR_CACHE")
    assert settings.emulator_cache() == tmp_path / "home" / "emulator"


def test_the_mailbox_timeout_is_read_at_each_wait(monkeypatch, tmp_path):
    """A peer's objects that never come fail the wait after `MAYA_EMU_MAILBOX_TIMEOUT`, set after import."""
    monkeypatch.setenv("MAYA_EMU_MAILBOX_TIMEOUT", "0")
    with pytest.raises(RuntimeError, match="rank 0 waited 0 s for objects from rank 1"):
        mailbox._receive(tmp_path, tmp_path / "objects.pkl", 0, 1, "broadcast_object_list")
    monkeypatch.setenv("MAYA_EMU_MAILBOX_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="MAYA_EMU_MAILBOX_TIMEOUT='soon' is not a number of seconds"):
        settings.mailbox_timeout_s()
