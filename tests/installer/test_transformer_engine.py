"""Transformer Engine on first need (`maya.installer.transformer_engine`): found by its extension on disk and its
versions; installed into Maya's own environment only, from the cached wheel together with TE, or built once into the
cache under a per-key lock that the build holds until it ends; refused as `MAYA_TE_AUTO` says; a failed build or
install remembered for every process. No TE and no real build: the installer and the build are stand-in scripts, so
these run in CI."""

import fcntl
import json
import os
import signal
import subprocess
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
from maya.installer import transformer_engine as te

INSTALLER = """
import json, sys
from pathlib import Path
log = Path(sys.argv[1])
with log.open("a") as f:
    f.write(json.dumps(sys.argv[2:]) + "\\n")
if any(a.endswith(".whl") for a in sys.argv[2:]):
    (log.parent / "installed").touch()
if sys.argv[2] == "uninstall":
    (log.parent / "installed").unlink(missing_ok=True)
"""
"""Stands in for uv: records each install's (and uninstall's) arguments; installing a wheel marks TE installed."""


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """A fake installer and a fake build (`build(code)` sets the build's Python body; it gets the output folder as
    argv[1] and appends its pid to `builds`); `installs()` lists the installer's calls. Maya's own environment, with
    the pinned TE once installed."""
    work = tmp_path / "stand-ins"
    work.mkdir()
    (work / "installer.py").write_text(INSTALLER)
    log = work / "installs.jsonl"
    monkeypatch.setattr(te, "_uses_uv", lambda: True)
    monkeypatch.setattr(te, "_installer", lambda: [sys.executable, str(work / "installer.py"), str(log)])
    monkeypatch.setattr(
        te,
        "_uninstall_command",
        lambda names: [sys.executable, str(work / "installer.py"), str(log), "uninstall", *names],
    )
    monkeypatch.setattr(te, "installed", lambda: (work / "installed").exists())
    monkeypatch.setattr(te, "mismatch", lambda: None)
    monkeypatch.setattr(te, "own_environment", lambda: True)
    builds = work / "builds"
    prelude = (
        f"import os, sys, time\nfrom pathlib import Path\nopen({str(builds)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
    )

    def build(code: str) -> None:
        monkeypatch.setattr(te, "_build_command", lambda into: [sys.executable, "-c", prelude + code, str(into)])

    build("raise SystemExit('the build ran')")

    def installs() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return types.SimpleNamespace(build=build, installs=installs, builds=builds, work=work)


WHEEL = "transformer_engine_torch-2.20.2-cp311-cp311-linux_x86_64.whl"
GOOD_BUILD = f"Path(sys.argv[1], {WHEEL!r}).write_bytes(b'wheel')"
REPLACE = ["--reinstall-package", "transformer-engine-torch"]


def leftovers(folder: Path) -> list[str]:
    """The build's temporary folders beside the cache's folders (any key's)."""
    return sorted(p.name for p in folder.parent.glob(".*.build-*"))


def build_install() -> list[str]:
    """What a build installs before it: TE (its core) and the extension's build requirements, around the torch."""
    return [*te.requirements(), te.torch_pin()]


def rollback() -> list[str]:
    """What a failed or interrupted install or build undoes: TE installed without its extension."""
    return ["uninstall", "transformer-engine", "transformer-engine-cu13", "transformer-engine-torch"]


def final_install(wheel: Path) -> list[str]:
    """The one install that puts TE in place: its packages and the extension's wheel, around the installed torch."""
    return [*REPLACE, *te.requirements(), te.torch_pin(), str(wheel)]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


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


def fake_distribution(site: Path, name: str, version: str, url: str | None = None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if url:
        (info / "direct_url.json").write_text(json.dumps({"url": url, "archive_info": {}}))


def test_an_installed_te_of_another_release_or_torch_is_a_mismatch(monkeypatch, tmp_path):
    """After a pin bump, or with the extension's wheel built for another torch or Python (its cache key, from the
    installer's record of the file it installed), or without TE's core or core library (an extension wheel alone), the
    installed TE is not the one Maya installs."""
    key = te.wheel_folder().name
    other = key.replace("-cp", "-cp99-was-cp")
    site = tmp_path / "site"
    without_te = [p for p in sys.path if not any(Path(p).glob("transformer_engine*.dist-info"))]
    monkeypatch.setattr(sys, "path", [str(site), *without_te])  # a TE installed here must not answer
    fake_distribution(site, "transformer_engine_torch", "2.20.2", f"file://{tmp_path}/wheels/{key}/{WHEEL}")
    assert te.mismatch() == "transformer-engine is not installed"
    fake_distribution(site, "transformer_engine", "2.20.2")
    assert te.mismatch() == "transformer-engine-cu13 is not installed"
    fake_distribution(site, "transformer_engine_cu13", "2.20.2")
    assert te.installed_key() == key and te.mismatch() is None
    (site / "transformer_engine_torch-2.20.2.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": f"file://{tmp_path}/wheels/{other}/{WHEEL}"})
    )
    assert te.mismatch() == f"its extension is the wheel built as {other}, not {key}"
    (site / "transformer_engine-2.20.2.dist-info").rename(site / "transformer_engine-2.19.0.dist-info")
    (site / "transformer_engine-2.19.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.19.0\n"
    )
    assert te.mismatch() == "transformer-engine 2.19.0 is installed where Maya pins 2.20.2"
    (site / "transformer_engine-2.19.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.20.2+git1234abc\n"
    )  # a source build's
    assert te.mismatch() == "transformer-engine 2.20.2+git1234abc is installed where Maya pins 2.20.2"


def test_a_mismatched_te_is_replaced_by_the_cached_wheel(stand_ins, monkeypatch):
    """`ensure` (and so `MAYA_WITH_TE=1 scripts/setup`) does not stop at an installed TE that is not the pinned one for
    this torch: it installs the wheel of the current key over it."""
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    (stand_ins.work / "installed").touch()
    monkeypatch.setattr(te, "mismatch", lambda: None if len(stand_ins.installs()) else "built for another torch")
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    te.ensure("this row")
    assert stand_ins.installs() == [final_install(folder / WHEEL)]
    te.ensure("this row")  # the pinned one: nothing more
    assert len(stand_ins.installs()) == 1


def test_an_install_that_leaves_a_mismatch_says_so_rather_than_installing_at_every_need(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    monkeypatch.setattr(te, "mismatch", lambda: "transformer-engine 2.19.0 is installed where Maya pins 2.20.2")
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    with pytest.raises(te.Unavailable, match=r"installed, but transformer-engine 2.19.0 is installed where Maya pins"):
        te.ensure("this row")


def test_the_te_extra_is_read_from_the_installed_metadata():
    """The requirements installed and the release built are pyproject.toml's `te` extra (one source): TE's core, whose
    core library its extra names, and what `pip wheel --no-build-isolation` needs."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["te"]
    assert [r.replace(" ", "") for r in te.requirements()] == [r.replace(" ", "") for r in extra]
    pin = next(r for r in extra if r.startswith("transformer-engine["))
    assert te.version() == pin.split("==")[1]
    assert te.core_library() == f"transformer-engine-{pin.split('[core-')[1].split(']')[0]}"
    assert {"setuptools", "pip", "wheel"} <= {r.split(">")[0].split("=")[0] for r in extra}


def test_without_maya_s_metadata_it_says_how_to_set_up(monkeypatch):
    """Maya run from its sources alone (no installed distribution) has no `te` extra to install."""

    def missing(name: str):
        raise te.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(te.metadata, "requires", missing)
    with pytest.raises(te.Unavailable, match=r"no `te` extra .*set Maya up with `MAYA_WITH_TE=1 scripts/setup`"):
        te.requirements()


def test_off_refuses_naming_the_setup(stand_ins, maya_home, monkeypatch):
    """In Maya's own environment the refusal names the setup; anywhere else the command that installs TE there."""
    monkeypatch.setenv("MAYA_TE_AUTO", "off")
    with pytest.raises(te.Unavailable) as refused:
        te.ensure("this row")
    assert str(refused.value) == (
        "this row needs Transformer Engine's PyTorch extension, which is not installed for this interpreter, and "
        "MAYA_TE_AUTO=off refuses installing it: install it with `MAYA_WITH_TE=1 scripts/setup`"
    )
    monkeypatch.setattr(te, "own_environment", lambda: False)
    with pytest.raises(te.Unavailable) as refused:
        te.ensure("this row")
    assert str(refused.value).endswith(f"install it with `{sys.executable} -m maya.installer.transformer_engine`")
    assert stand_ins.installs() == [] and not (maya_home / "wheels").exists()


@pytest.mark.parametrize("present", [False, True])
def test_an_unknown_mode_is_named_whether_or_not_te_is_installed(stand_ins, monkeypatch, present):
    if present:
        (stand_ins.work / "installed").touch()
    monkeypatch.setenv("MAYA_TE_AUTO", "yes")
    with pytest.raises(ValueError, match=r"MAYA_TE_AUTO='yes' is not one of build, cached, off"):
        te.ensure("this row")


def test_outside_maya_s_environment_it_names_the_command_and_installs_only_when_asked(stand_ins, monkeypatch):
    """A user's venv (or `scripts/torch_env`'s) is not Maya's to change on its own: the refusal names the command that
    installs TE there, and that command (`main`, the explicit route) does, whatever `MAYA_TE_AUTO` says."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    monkeypatch.setattr(te, "own_environment", lambda: False)
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    with pytest.raises(te.Unavailable) as refused:
        te.ensure("this row")
    message = str(refused.value)
    assert (
        f"{sys.prefix} is not that: install it there with `{sys.executable} -m maya.installer.transformer_engine`"
        in (message)
    )
    assert f"resolved with the installed {te.torch_pin()}" in message
    assert stand_ins.installs() == []
    (stand_ins.work / "installed").touch()  # a TE the user installed there is left as it is
    te.ensure("this row")
    (stand_ins.work / "installed").unlink()
    monkeypatch.setenv("MAYA_TE_AUTO", "off")
    assert te.main() == 0
    assert stand_ins.installs() == [final_install(folder / WHEEL)]


def test_own_environment_is_the_marker_scripts_setup_writes(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert not te.own_environment()
    (tmp_path / te.MARKER).write_text("made by scripts/setup\n")
    assert te.own_environment()


def test_cached_refuses_building_when_no_wheel_is_cached(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    with pytest.raises(te.Unavailable, match=r"MAYA_TE_AUTO=cached refuses building it.*MAYA_WITH_TE=1 scripts/setup"):
        te.ensure("this row")
    assert not stand_ins.builds.exists() and stand_ins.installs() == []


def test_a_cached_wheel_is_installed_with_te_in_one_install_without_building(stand_ins, monkeypatch, capsys):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    te.ensure("this row")
    assert stand_ins.installs() == [final_install(folder / WHEEL)]
    assert not stand_ins.builds.exists()
    te.ensure("this row")  # installed: nothing more
    assert len(stand_ins.installs()) == 1
    assert "this row needs Transformer Engine 2.20.2" in capsys.readouterr().err


@pytest.mark.slow
def test_a_build_installs_te_and_its_requirements_before_it_and_then_the_wheel(stand_ins, monkeypatch):
    """The verified order: the `te` extra (TE's core included: the extension's build needs it) before `pip wheel`, then
    TE with the wheel."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    stand_ins.build(GOOD_BUILD)
    te.ensure("this row")
    folder = te.wheel_folder()
    assert stand_ins.installs() == [build_install(), final_install(folder / WHEEL)]


def test_installers_command_lines(monkeypatch, tmp_path):
    """uv: no project's configuration (`--no-config`), the extension replaced by `--reinstall-package`; pip (no uv
    beside the interpreter): pip's own flags. Both run in a neutral folder, not the user's project, and so does the
    removal that undoes a failed install."""
    ran: list[tuple[list[str], Path]] = []

    def supervise(self, command, log, *, cwd, env=None, doing=None):
        ran.append((command, cwd))
        return 0

    monkeypatch.setattr(te._Job, "supervise", supervise)
    job = te._Job(None, "retry", [])
    monkeypatch.setattr(te, "_uses_uv", lambda: True)
    job.install(["pkg"], "it", replace=True)
    uv = str(Path(sys.executable).parent / "uv")
    assert ran[-1][0] == [
        *[uv, "pip", "install", "--quiet", "--compile-bytecode", "--no-config", "--python", sys.executable],
        *REPLACE,
        "pkg",
    ]
    job.install(["pkg"], "it")  # the build's requirements: nothing replaced
    assert ran[-1][0] == [uv, "pip", "install", "--quiet", "--compile-bytecode", "--no-config", "--python"] + [
        sys.executable,
        "pkg",
    ]
    assert te._uninstall_command(["a", "b"]) == [uv, "pip", "uninstall", "--quiet", "--no-config", "--python"] + [
        sys.executable,
        "a",
        "b",
    ]
    monkeypatch.setattr(te, "_uses_uv", lambda: False)
    job.install(["pkg"], "it", replace=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pkg"]
    assert ran[-1][0] == pip
    assert te._uninstall_command(["a"]) == [sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet"] + [
        "--disable-pip-version-check",
        "a",
    ]
    assert all(cwd != Path.cwd() and not cwd.exists() for _, cwd in ran)  # a temporary folder, removed


def test_the_build_is_from_the_sdist_against_the_installed_torch(tmp_path):
    """`pip wheel` builds the pinned extension's sdist without build isolation (the installed torch), never taking a
    registry wheel or one pip built earlier (maybe for another torch) for one built here."""
    command = te._build_command(tmp_path)
    assert command[:3] == [sys.executable, "-m", "pip"] and command[3] == "wheel"
    assert command[command.index("--no-binary") + 1] == "transformer-engine-torch"
    assert {"--no-deps", "--no-build-isolation", "--no-cache-dir"} <= set(command)
    assert command[-3:] == ["transformer-engine-torch==2.20.2", "-w", str(tmp_path)]


def test_pip_uninstalls_an_installed_extension_before_installing_the_wheel(stand_ins, monkeypatch, tmp_path):
    """pip keeps an installed wheel of the same version, so the extension is uninstalled first whenever its
    distribution is there: metadata left without its extension's file (not `installed()`) too."""
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    monkeypatch.setattr(te, "_uses_uv", lambda: False)
    site = tmp_path / "site"
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    fake_distribution(site, "transformer_engine_torch", "2.20.2")  # its .so gone: not installed, but pip's record is
    assert not te.installed()
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    te.ensure("this row")
    assert stand_ins.installs() == [["uninstall", "transformer-engine-torch"], final_install(folder / WHEEL)[2:]]


@pytest.mark.slow
def test_a_failed_build_leaves_no_wheel_nor_te_and_is_remembered_for_every_process(stand_ins, monkeypatch):
    """The build fails: no wheel, no TE (what was installed for the build is uninstalled again), a marker beside the
    wheels naming the log. No later process builds again on its own (the marker is on disk, not in this process); it says how to
    retry, and the explicit command (`MAYA_WITH_TE=1 scripts/setup`'s) does."""
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
    assert stand_ins.installs() == [build_install(), rollback()]  # no importable TE without its extension
    marker = te.failure_marker(folder)
    assert marker.read_text() == message + "\n"
    with pytest.raises(te.Unavailable) as again:
        te.ensure("the next row")
    assert f"an earlier attempt to install it failed, so no process tries again on its own: {message.strip()}" in str(
        again.value
    )
    assert str(again.value).endswith(f"(retry with `MAYA_WITH_TE=1 scripts/setup`, or delete {marker})")
    assert len(stand_ins.builds.read_text().split()) == 1
    stand_ins.build(GOOD_BUILD)
    assert te.main() == 0  # the explicit route retries
    assert not marker.exists() and (folder / WHEEL).is_file() and len(stand_ins.builds.read_text().split()) == 2


def test_a_failed_install_is_remembered_too(stand_ins, monkeypatch):
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    monkeypatch.setattr(te, "_installer", lambda: [sys.executable, "-c", "import sys; sys.exit('no network')"])
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    rolled_back = stand_ins.work / "rolled-back"
    monkeypatch.setattr(
        te, "_uninstall_command", lambda names: [sys.executable, "-c", f"open({str(rolled_back)!r}, 'w')"]
    )
    with pytest.raises(te.Unavailable, match="no network"):
        te.ensure("this row")
    assert "no network" in te.failure_marker(folder).read_text()
    assert rolled_back.exists()  # what it may have installed before failing is uninstalled again
    with pytest.raises(te.Unavailable, match="an earlier attempt to install it failed"):
        te.ensure("the next row")


@pytest.mark.slow
def test_an_interrupted_build_stops_its_processes_and_leaves_no_wheel(stand_ins, monkeypatch):
    """Ctrl-C during the build (raised here at its progress line): the build's processes are killed, its
    temporary folder removed, nothing cached, TE uninstalled again."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    monkeypatch.setattr(te, "HEARTBEAT_S", 0.1)
    stand_ins.build(f"Path(sys.argv[1], {WHEEL!r}).write_bytes(b'half')\ntime.sleep(60)")

    def say(message: str) -> None:
        if message.startswith("still building") and stand_ins.builds.exists():  # the build runs
            raise KeyboardInterrupt

    monkeypatch.setattr(te, "_say", say)
    folder = te.wheel_folder()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        te.ensure("this row")
    assert time.monotonic() - started < 30  # the build was killed, not waited for
    pid = int(stand_ins.builds.read_text())
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert not folder.exists() and leftovers(folder) == []
    assert stand_ins.installs() == [build_install(), rollback()]


PARENT = """
import sys
from maya.installer import transformer_engine as te
te.own_environment = lambda: True
te.installed = lambda: False
te._installer = lambda: [sys.executable, "-c", sys.argv[2]]
te._uninstall_command = lambda names: [sys.executable, "-c", sys.argv[3]]
te._build_command = lambda into: [sys.executable, "-c", sys.argv[1], str(into)]
te.ensure("this row")
"""
"""A Maya process that needs TE and installs it with the stand-in build `argv[1]`, installer `argv[2]` and removal
`argv[3]`."""


def holds(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open."""
    fds = Path(f"/proc/{pid}/fd")
    return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())


@pytest.mark.parametrize("phase", ["build", "install"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP], ids=["TERM", "KILL", "HUP"])
@pytest.mark.slow
def test_a_job_ends_with_maya_however_it_is_stopped_and_holds_the_lock_until_undone(stop, phase, maya_home, tmp_path):
    """Maya stopped, during the build or the final install, by a signal it does not turn into an exception, or killed:
    the job's processes end with it (the supervisor's parent-death signal; in process groups of their own too), what
    was installed is uninstalled again,
    and the lock stays taken (the job and its supervisor hold it) until all that is over, so no second install starts
    beside a running one."""
    pids, undone = tmp_path / "pids", tmp_path / "undone"
    hang = (  # and a child in a process group of its own, as ninja starts each compiler
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], process_group=0)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\ntime.sleep(120)"
    )
    if phase == "install":  # a cached wheel: no build, the install hangs
        folder = te.wheel_folder()
        folder.mkdir(parents=True)
        (folder / WHEEL).write_bytes(b"wheel")
    build, installer = (hang, "pass") if phase == "build" else ("raise SystemExit(9)", hang)
    undo = f"import os, time\nopen({str(undone)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3)"
    env = {**os.environ, "MAYA_TE_AUTO": "build", "MAYA_HOME": str(maya_home)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, build, installer, undo], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        assert parent.poll() is None, parent.stderr.read()
        time.sleep(0.05)
    pid, child = map(int, pids.read_text().split())
    locks = list((maya_home / "wheels").glob(".*.lock"))
    assert len(locks) == 1 and alive(pid) and alive(child)
    supervisor = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    assert supervisor != parent.pid and holds(supervisor, locks[0]) and holds(pid, locks[0])
    parent.send_signal(stop)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    while not (undone.exists() and undone.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    undoer = int(undone.read_text())
    assert not alive(pid) and not alive(child)  # killed before the undo
    with open(locks[0], "w") as lock:
        assert alive(undoer)
        with pytest.raises(BlockingIOError):  # still held while the undo runs
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        deadline = time.monotonic() + 10
        while alive(undoer) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: no one installs


def test_an_interrupt_that_kills_the_supervisor_before_it_can_undo_undoes_in_maya(monkeypatch, tmp_path):
    """Ctrl-C while the supervisor is still starting (before its handlers, SIGTERM kills it outright): Maya runs
    the undo itself."""
    monkeypatch.setattr(te, "SUPERVISOR", "import time; time.sleep(60)")  # a supervisor with no handlers yet
    monkeypatch.setattr(te, "HEARTBEAT_S", 0.1)

    def say(message: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(te, "_say", say)
    undone = tmp_path / "undone"
    with open(tmp_path / "lock", "w") as lock:
        job = te._Job(lock, "retry", [sys.executable, "-c", f"open({str(undone)!r}, 'w')"])
        with pytest.raises(KeyboardInterrupt):
            job.supervise(["true"], tmp_path / "log", cwd=tmp_path, doing="installing")
    assert undone.exists()


@pytest.mark.slow
def test_a_killed_builds_leftovers_are_removed_and_never_used(stand_ins, monkeypatch):
    """A build killed outright (SIGKILL) leaves its temporary folder, a half-written wheel in it: the next holder of
    the key's lock removes it, builds anew and caches only the whole wheel; another key's build folder (another lock's,
    maybe building now) is left alone."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    folder = te.wheel_folder()
    stale = folder.parent / f"{te.build_prefix(folder)}k1lled"
    stale.mkdir(parents=True)
    (stale / WHEEL).write_bytes(b"half")
    other = folder.parent / f"{te.build_prefix(folder.with_name(folder.name.replace('-cp', '-cp99-')))}running"
    other.mkdir()
    stand_ins.build(GOOD_BUILD)
    te.ensure("this row")
    assert leftovers(folder) == [other.name] and (folder / WHEEL).read_bytes() == b"wheel"
    assert not (folder.parent / f"{folder.name}.log").exists()


@pytest.mark.slow
def test_concurrent_needs_build_once(stand_ins, monkeypatch, capsys):
    """Two processes needing TE at once (two commands, `maya search --parallel`'s workers; threads here): one builds
    and installs, the other waits on the lock and finds it installed."""
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


@pytest.mark.slow
def test_a_build_for_one_key_survives_an_install_for_another(stand_ins, monkeypatch):
    """Two keys at once (two Pythons sharing `$MAYA_HOME`; threads here): one builds while the other installs its
    cached wheel under its own lock; the install does not remove the build's folder, and both succeed."""
    monkeypatch.setenv("MAYA_TE_AUTO", "build")
    building, cached = te.wheel_folder(), te.wheel_folder().with_name(te.wheel_folder().name.replace("-cp", "-cp99-"))
    cached.mkdir(parents=True)
    (cached / WHEEL).write_bytes(b"wheel")
    started = stand_ins.work / "started"
    stand_ins.build(f"open({str(started)!r}, 'w')\ntime.sleep(1.5)\n{GOOD_BUILD}")
    key = threading.local()
    monkeypatch.setattr(te, "wheel_folder", lambda: key.folder)
    monkeypatch.setattr(te, "installed", lambda: False)
    monkeypatch.setattr(te, "mismatch", lambda: None)

    def need(folder: Path) -> None:
        key.folder = folder
        if folder == cached:
            deadline = time.monotonic() + 30
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(leftovers(building)) == 1
        with pytest.raises(te.Unavailable, match="its extension is not found"):  # `installed` says no, on purpose
            te.ensure(folder.name)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(need, [building, cached]))
    assert (building / WHEEL).read_bytes() == b"wheel" and not te.failure_marker(building).exists()


def test_the_lock_is_per_wheel_key(stand_ins, monkeypatch, capsys):
    """A build for another Python or torch (another key) does not hold up this one."""
    monkeypatch.setenv("MAYA_TE_AUTO", "cached")
    folder = te.wheel_folder()
    folder.mkdir(parents=True)
    (folder / WHEEL).write_bytes(b"wheel")
    with open(folder.parent / f".{folder.name.replace('-cp', '-cp99-')}.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        te.ensure("this row")
    assert "waiting" not in capsys.readouterr().err and len(stand_ins.installs()) == 1


@pytest.mark.parametrize(
    "source, imports",
    [
        ("import transformer_engine.pytorch as te\n", True),
        ("from transformer_engine.common import recipe\n", True),
        ("from transformer_engine import pytorch\n", True),
        ("import torch, transformer_engine\n", True),
        ("if __name__ == '__main__':\n    import transformer_engine\n", True),
        ("if '__main__' == __name__:\n    import transformer_engine\n", True),
        ("if __name__ == '__main__' or True:\n    import transformer_engine\n", False),
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


@pytest.mark.parametrize(
    "module, source, imports",
    [
        ("model.py", "import transformer_engine.pytorch as te\n", True),
        ("model/__init__.py", "from transformer_engine.pytorch import Linear\n", True),
        ("model.py", "try:\n    import transformer_engine\nexcept ImportError:\n    pass\n", False),
        ("model.py", "if __name__ == '__main__':\n    import transformer_engine\n", False),  # not run on import
        ("model.py", "import layers\n", False),  # one level only: layers.py is not read
        ("other.py", "import transformer_engine\n", False),  # not imported by the script
    ],
)
def test_a_script_needs_te_when_a_module_beside_it_imports_it(tmp_path, module, source, imports):
    """`from model import GPT` where `model.py` (or the package `model/`) beside the script imports TE at its module
    level: one level of the script's own modules is read."""
    (tmp_path / module).parent.mkdir(exist_ok=True)
    (tmp_path / module).write_text(source)
    (tmp_path / "layers.py").write_text("import transformer_engine\n")
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom model import GPT\n")
    assert te.imports_te([str(script)]) is imports


def test_a_module_run_is_not_read():
    assert not te.imports_te(["-m", "transformer_engine"])


def test_a_rank_that_fails_importing_te_says_how_to_install_it(monkeypatch):
    """An import the scan cannot see (inside `main()`): the rank's ModuleNotFoundError gets the install hint."""
    reason = "emulation failed: ModuleNotFoundError: No module named 'transformer_engine'"
    monkeypatch.setattr(te, "own_environment", lambda: True)
    assert te.missing_hint(reason) == (
        f"the script imports Transformer Engine, which is not installed for {sys.executable}: install it with "
        "MAYA_WITH_TE=1 scripts/setup"
    )
    monkeypatch.setattr(te, "own_environment", lambda: False)
    assert te.missing_hint(reason).endswith(f"`{sys.executable} -m maya.installer.transformer_engine`")
    assert te.missing_hint("emulation failed: ModuleNotFoundError: No module named 'apex'") is None


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


def test_emulate_reports_an_install_that_fails_on_the_disk(tmp_path, monkeypatch):
    """An OSError from installing (a read-only `$MAYA_HOME`) is the command's error, not a traceback."""
    script = tmp_path / "train_te.py"
    script.write_text("import transformer_engine.pytorch as te\n")

    def read_only(needed_by: str) -> None:
        raise PermissionError(13, "Permission denied", "/home/u/.maya/wheels")

    monkeypatch.setattr(te, "ensure", read_only)
    out = CliRunner().invoke(app, ["emulate", "--out", str(tmp_path / "run"), "--", "python", str(script)])
    assert out.exit_code == 1 and not isinstance(out.exception, OSError)
    assert "Permission denied" in out.output


def test_a_capture_reused_from_the_cache_needs_no_te(tmp_path, monkeypatch):
    """A complete capture of the command is reused without installing anything."""
    from maya import api
    from maya.emulator import capture_cache

    script = tmp_path / "train_te.py"
    script.write_text("import transformer_engine.pytorch as te\n")
    cache = capture_cache.CaptureCache(tmp_path / "cache")
    cache.path("k").mkdir(parents=True)
    monkeypatch.setattr(capture_cache, "_complete", lambda run_dir: True)

    def refuse(needed_by: str) -> None:
        raise AssertionError("ensure ran")

    monkeypatch.setattr(te, "ensure", refuse)
    captured = api.capture([str(script)], cache=cache, key="k")
    assert captured.reused and captured.status == "complete"
