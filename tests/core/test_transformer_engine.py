"""Transformer Engine on first need (`maya.core.transformer_engine`): found by its extension on disk; installed from
the cached wheel, or built once into the cache under a lock; refused as `MAYA_TE_AUTO` says; a failed or
interrupted build leaves no wheel folder and no temporary one. No TE and no real build: the installer and the
build are stand-in scripts, so these run in CI."""

import json
import os
import sys
import threading
import time
import tomllib
import types
from concurrent.futures import ThreadPoolExecutor
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from paths import REPO
from typer.testing import CliRunner

from maya.cli import app
from maya.core import transformer_engine as te

INSTALLER = """
import json, sys
from pathlib import Path
log = Path(sys.argv[1])
with log.open("a") as f:
    f.write(json.dumps(sys.argv[2:]) + "\\n")
if any(a.endswith(".whl") for a in sys.argv[2:]):
    (log.parent / "installed").touch()
"""
"""Stands in for uv: records each install's arguments; installing a wheel marks TE installed."""


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """A fake installer and a fake build (`build(code)` sets the build's Python body; it gets the output folder as
    argv[1] and appends its pid to `builds`); `installs()` lists the installer's calls."""
    work = tmp_path / "stand-ins"
    work.mkdir()
    (work / "installer.py").write_text(INSTALLER)
    log = work / "installs.jsonl"
    monkeypatch.setattr(te, "_installer", lambda: [sys.executable, str(work / "installer.py"), str(log)])
    monkeypatch.setattr(te, "installed", lambda: (work / "installed").exists())
    monkeypatch.setattr(te, "_failed", {})
    builds = work / "builds"
    prelude = (
        f"import os, sys, time\nfrom pathlib import Path\nopen({str(builds)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
    )

    def build(code: str) -> None:
        monkeypatch.setattr(te, "_build_command", lambda into: [sys.executable, "-c", prelude + code, str(into)])

    build("raise SystemExit('the build ran')")

    def installs() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return types.SimpleNamespace(build=build, installs=installs, builds=builds)


WHEEL = "transformer_engine_torch-2.20.2-cp311-cp311-linux_x86_64.whl"
GOOD_BUILD = f"Path(sys.argv[1], {WHEEL!r}).write_bytes(b'wheel')"


def leftovers(folder: Path) -> list[str]:
    """The build's temporary folders beside the cache's folders."""
    return sorted(p.name for p in folder.parent.glob(".transformer-engine-torch-build-*"))


def test_transformer_engine_is_its_torch_extension_installed(monkeypatch, tmp_path):
    """TE's core alone cannot run Megatron's layers; its PyTorch extension module, from the wheel or from a source
    build's single distribution, can: found on the path, not imported."""
    monkeypatch.delitem(sys.modules, "transformer_engine_torch", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    (tmp_path / "transformer_engine").mkdir()
    (tmp_path / "transformer_engine" / "__init__.py").write_text("raise ImportError('imported')\n")
    assert not te.installed()
    (tmp_path / "transformer_engine_torch.py").write_text("raise ImportError('imported')\n")
    assert te.installed()
    (tmp_path / "transformer_engine_torch.py").unlink()
    loaded = types.ModuleType("transformer_engine_torch")
    loaded.__spec__ = None  # as Transformer Engine's import leaves the extension it loads by path
    monkeypatch.setitem(sys.modules, "transformer_engine_torch", loaded)
    assert te.installed()
    monkeypatch.delitem(sys.modules, "transformer_engine_torch")
    assert not te.installed()
    # the wheel: its extension inside TE's package, found by the distribution's record of it, if on disk
    extension = Path("transformer_engine") / "wheel_lib" / f"transformer_engine_torch{EXTENSION_SUFFIXES[0]}"
    info = tmp_path / "transformer_engine_torch-2.20.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformer_engine_torch\nVersion: 2.20.2\n")
    (info / "RECORD").write_text(f"{extension.as_posix()},,\n{info.name}/METADATA,,\n")
    assert not te.installed()  # metadata without its extension: cannot be imported
    (tmp_path / extension).parent.mkdir()
    (tmp_path / extension).write_bytes(b"")
    assert te.installed()


def test_the_te_extra_is_read_from_the_installed_metadata():
    """The requirements installed and the release built are pyproject.toml's `te` extra (one source)."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["te"]
    assert [r.replace(" ", "") for r in te.requirements()] == [r.replace(" ", "") for r in extra]
    pin = next(r for r in extra if r.startswith("transformer-engine["))
    assert te.version() == pin.split("==")[1]


def test_without_maya_s_metadata_it_says_how_to_set_up(monkeypatch):
    """Maya run from its sources alone (no installed distribution) has no `te` extra to install."""

    def missing(name: str):
        raise te.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(te.metadata, "requires", missing)
    with pytest.raises(te.Unavailable, match=r"no `te` extra .*set Maya up with `MAYA_WITH_TE=1 scripts/setup`"):
        te.requirements()


def test_off_refuses_naming_the_setup(stand_ins, maya_home, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "off")
    with pytest.raises(te.Unavailable) as refused:
        te.ensure("this row")
    assert str(refused.value) == (
        "this row needs Transformer Engine's PyTorch extension, which is not installed for this interpreter, and "
        "MAYA_TE_AUTO=off refuses installing it: install it with `MAYA_WITH_TE=1 scripts/setup`"
    )
    assert stand_ins.installs() == [] and not (maya_home / "wheels").exists()


def test_an_unknown_mode_is_named(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "yes")
    with pytest.raises(ValueError, match=r"MAYA_TE_AUTO='yes' is not one of build, cached, off"):
        te.ensure("this row")


def test_cached_refuses_building_when_no_wheel_is_cached(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    with pytest.raises(te.Unavailable, match=r"MAYA_TE_AUTO=cached refuses building it.*MAYA_WITH_TE=1 scripts/setup"):
        te.ensure("this row")
    assert not stand_ins.builds.exists() and stand_ins.installs() == []


def test_a_cached_wheel_is_installed_after_the_extra_without_building(stand_ins, monkeypatch, capsys):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    te.ensure("this row")
    assert stand_ins.installs() == [
        te.requirements(),
        ["--no-deps", "--reinstall-package", "transformer-engine-torch", str(folder / WHEEL)],
    ]
    assert not stand_ins.builds.exists()
    te.ensure("this row")  # installed: nothing more
    assert len(stand_ins.installs()) == 2
    assert "this row needs Transformer Engine 2.20.2" in capsys.readouterr().err


def test_a_failed_build_leaves_no_wheel_says_why_and_is_not_retried_in_the_process(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    stand_ins.build(f"Path(sys.argv[1], {WHEEL!r}).write_bytes(b'half')\nprint('nvcc: error 42')\nsys.exit(3)")
    folder = te.wheel_folder()
    with pytest.raises(te.Unavailable) as failed:
        te.ensure("this row")
    message = str(failed.value)
    assert message.startswith("transformer-engine-torch 2.20.2 did not build (exit 3; log ")
    assert "retry with `MAYA_WITH_TE=1 scripts/setup`" in message and message.endswith("nvcc: error 42\n")
    assert not folder.exists() and leftovers(folder) == []
    assert "nvcc: error 42" in (folder.parent / f"{folder.name}.log").read_text()  # kept for the user
    with pytest.raises(te.Unavailable) as again:
        te.ensure("the next row")
    assert str(again.value) == message and len(stand_ins.builds.read_text().split()) == 1


def test_an_interrupted_build_stops_its_processes_and_leaves_no_wheel(stand_ins, monkeypatch):
    """Ctrl-C during the build (raised here at its progress line): the build's processes are killed, its
    temporary folder removed, nothing cached."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    monkeypatch.setattr(te, "HEARTBEAT_S", 0.1)
    stand_ins.build(f"Path(sys.argv[1], {WHEEL!r}).write_bytes(b'half')\ntime.sleep(60)")

    def say(message: str) -> None:
        if message.startswith("still building"):
            raise KeyboardInterrupt

    monkeypatch.setattr(te, "_say", say)
    folder = te.wheel_folder()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        te.ensure("this row")
    assert time.monotonic() - started < 30  # the build was killed, not waited for
    pid = int(stand_ins.builds.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not folder.exists() and leftovers(folder) == [] and stand_ins.installs() == [te.requirements()]


def test_a_killed_builds_leftovers_are_removed_and_never_used(stand_ins, monkeypatch):
    """A build killed outright (SIGKILL) leaves its temporary folder, a half-written wheel in it: the next holder of
    the lock removes it, builds anew and caches only the whole wheel."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    folder = te.wheel_folder()
    stale = folder.parent / ".transformer-engine-torch-build-k1lled"
    stale.mkdir(parents=True)
    (stale / WHEEL).write_bytes(b"half")
    stand_ins.build(GOOD_BUILD)
    te.ensure("this row")
    assert leftovers(folder) == [] and (folder / WHEEL).read_bytes() == b"wheel"
    assert not (folder.parent / f"{folder.name}.log").exists()


def test_concurrent_needs_build_once(stand_ins, monkeypatch, capsys):
    """Two rows needing TE at once (`maya validate --jobs 2`, or two commands): one builds and installs, the other
    waits on the lock and finds it installed."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    stand_ins.build(f"time.sleep(1.0)\n{GOOD_BUILD}")
    te.wheel_folder()  # torch imported before the threads start
    started = threading.Barrier(2)

    def need(name: str) -> None:
        started.wait()
        te.ensure(name)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(need, ["row 1", "row 2"]))
    assert len(stand_ins.builds.read_text().split()) == 1
    assert sum(any(a.endswith(".whl") for a in call) for call in stand_ins.installs()) == 1
    err = capsys.readouterr().err
    assert "another process is installing it; waiting for it" in err
    assert f"about {te.BUILD_MINUTES_2_CORES} minutes on 2 idle cores with MAX_JOBS=2" in err  # said up front
    assert (te.wheel_folder() / WHEEL).is_file()


@pytest.mark.parametrize(
    "source, imports",
    [
        ("import transformer_engine.pytorch as te\n", True),
        ("from transformer_engine.common import recipe\n", True),
        ("import torch, transformer_engine\n", True),
        ("if __name__ == '__main__':\n    import transformer_engine\n", True),
        ("try:\n    import transformer_engine\nexcept ImportError:\n    pass\n", False),
        ("def fp8():\n    import transformer_engine.pytorch\n", False),
        ("if args.fp8:\n    import transformer_engine.pytorch\n", False),
        ("from .transformer_engine import x\n", False),
        ("import transformer_engines\n", False),
        ("this is not python(\n", False),
    ],
)
def test_a_script_needs_te_when_it_imports_it_unconditionally(tmp_path, source, imports):
    script = tmp_path / "train.py"
    script.write_text(source)
    assert te.imports_te([str(script), "--steps", "2"]) is imports


def test_a_module_run_is_not_read():
    assert not te.imports_te(["-m", "transformer_engine"])


def test_emulating_a_te_script_without_it_fails_before_emulating(tmp_path, stand_ins):
    """`maya emulate` of a script importing TE, with installing refused (the tests' MAYA_TE_AUTO=off): it says so and
    how to install it, and runs nothing."""
    script = tmp_path / "train_te.py"
    script.write_text("import transformer_engine.pytorch as te\nraise SystemExit('ran')\n")
    out = CliRunner().invoke(app, ["emulate", "--out", str(tmp_path / "run"), "--", "python", str(script)])
    assert out.exit_code != 0
    flat = " ".join(out.output.split())
    assert "train_te.py, which imports transformer_engine, needs Transformer Engine's PyTorch extension" in flat
    assert "MAYA_WITH_TE=1 scripts/setup" in flat
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
