"""Transformer Engine for Maya's own environment: found, or installed the first time something needs it.

The registry has no `transformer-engine-torch` wheel (TE's PyTorch extension) for Maya's torch, so its sdist is built
once against the installed torch (about 10 minutes on 2 idle cores) into `$MAYA_HOME/wheels/<key>/`, renamed into place
when complete, and every later install with the same TE, torch and Python installs that wheel in seconds. `ensure`
is the one route: `scripts/setup` with `MAYA_WITH_TE=1` runs it (`python -m maya.installer.transformer_engine`), and
so do an `amp_fp8` MPT row, a capture of a script that imports TE (`maya emulate`, `maya search`, a validation row),
so that they run after the plain setup. `MAYA_TE_AUTO` (`build`, `cached`, `off`) says how far the automatic route may
go, and it goes only into the environment `scripts/setup` made (its marker file); anywhere else only the explicit
command installs.

Processes share the work through a lock file per wheel key beside the wheels: one installs (or builds), the others wait
and find it installed. Every install and the build run under a supervisor that holds the lock and, when Maya's
process ends (killed included) or the thread that started it ends, kills them and undoes what they installed. The
build needs TE's core installed (the `te` extra, as the verified route installs it before `pip wheel`); a failed or
interrupted build or install uninstalls it again, so no importable TE is left without its extension. A failure is
remembered in a marker beside the wheels, so no later process repeats it until the user retries.
"""

from __future__ import annotations

import ast
import fcntl
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from maya.core import settings

SETUP = "MAYA_WITH_TE=1 scripts/setup"
"""The command that installs Transformer Engine into Maya's own environment by hand (and retries a failed build)."""
MODULE = "maya.installer.transformer_engine"
EXTRA = "te"
"""Maya's extra that lists TE's Python packages and the extension's build and run requirements."""
CORE = "transformer-engine"
"""TE's own distribution (its Python package and, through its extra, its core library): installed with the wheel."""
EXTENSION = "transformer-engine-torch"
MARKER = "maya-environment"
"""The file `scripts/setup` writes at the root of the environment it makes (`.venv/`): automatic installs go there only."""
BUILD_MINUTES_2_CORES = 10
"""The extension's build on 2 idle cores (`MAX_JOBS=2`, 33 C++ files): 1,094 CPU-s for `MAYA_WITH_TE=1 scripts/setup`
in a fresh clone (2026-11-29), about 9 minutes on 2 cores; 18 minutes when it gets one core's worth of busy ones."""
MODES = ("build", "cached", "off")
HEARTBEAT_S = 60.0
"""How often a running build says on stderr that it is still running."""
LOG_TAIL = 30
"""Lines of a failed build's log shown in its error."""
SUPERVISOR = """
import ctypes, json, os, signal, subprocess, sys, time
STOP = {signal.SIGTERM, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, STOP)  # delivered once the job has started
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: when the thread that started it ends
parent, lock, undo, command = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
def own_group():
    os.setsid()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
job = subprocess.Popen(command, preexec_fn=own_group, pass_fds=(lock,))
def finish(code):
    if code and undo:
        subprocess.run(undo, stdin=subprocess.DEVNULL)
    os._exit(code if code >= 0 else 128 - code)
def session():
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(entry) != job.pid and os.getsid(int(entry)) == job.pid:
                found.append(int(entry))
        except OSError:
            pass
    return found
def stop(*_):
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)
    try:
        os.killpg(job.pid, signal.SIGKILL)  # the job's process group: it spawns no more
        os.waitpid(job.pid, 0)  # not job.wait(): its lock may be held by the wait this signal interrupted
    except (ProcessLookupError, ChildProcessError):  # it had ended
        pass
    for _ in range(200):  # then its whole session: ninja runs each compiler in a process group of its own
        if not (left := session()):
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    finish(128 + signal.SIGTERM)
for number in STOP:
    signal.signal(number, stop)
if os.getppid() != parent:  # Maya ended before prctl
    stop()
signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP)
finish(job.wait())
"""
"""Runs a job (`argv[4:]`: an install or the build) in its own session, it and the job holding the lock file
(descriptor `argv[2]`) they inherit; when the job fails, or Maya's process (or the thread that started the supervisor)
ends, SIGKILL included (the kernel's parent-death signal), or Maya signals it (SIGTERM), it kills every process of the
job's session (compilers in process groups of their own included) and runs `argv[3]`, the command that undoes what the job installed (JSON; `[]`: none). The lock is free only once none
runs."""


class Unavailable(ValueError):
    """Transformer Engine is not installed and could not be: the message says why and the command that fixes it."""


def installed() -> bool:
    """Whether Transformer Engine's PyTorch extension (the `transformer_engine_torch` module: the
    `transformer-engine-torch` wheel, or a source or container build's single `transformer_engine`) is installed
    for this interpreter, which runs the emulated ranks; looked up, not imported (TE loads CUDA's libraries at import).
    The wheel puts the module inside TE's package (`transformer_engine/wheel_lib/`), where TE loads it by path, so
    it is found by its distribution's record of the extension's file, which must be on disk (metadata left behind
    by a partial removal does not count); a source build's by its module."""
    if "transformer_engine_torch" in sys.modules:  # already loaded (TE loads it by path: no module spec)
        return True
    try:
        files = metadata.distribution("transformer_engine_torch").files or []
    except metadata.PackageNotFoundError:
        files = []
    extension = {f"transformer_engine_torch{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES}
    if any(f.name in extension and f.locate().is_file() for f in files):
        return True
    return importlib.util.find_spec("transformer_engine_torch") is not None


def mismatch() -> str | None:
    """Why the installed Transformer Engine is not the one Maya installs (its core, core library or extension missing
    or of another release than the `te` extra pins: a source build's `2.20.2+git…` too; or the extension's wheel cached
    under another key: built for another torch or Python); None when it is, or when Maya has no metadata to tell."""
    try:
        pin = version()
    except Unavailable:
        return None
    for name in (CORE, core_library(), EXTENSION):
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            return f"{name} is not installed"
        if found != pin:
            return f"{name} {found} is installed where Maya pins {pin}"
    key = installed_key()
    if key is not None and key != wheel_folder().name:
        return f"its extension is the wheel built as {key}, not {wheel_folder().name}"
    return None


def installed_key() -> str | None:
    """The cache key (`wheel_folder`'s name) of the extension's wheel installed, from the installer's record of the
    file it installed; None when it was not installed from Maya's cache."""
    try:
        record = metadata.distribution(EXTENSION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        url = urlparse(json.loads(record or "{}").get("url", ""))
    except (json.JSONDecodeError, AttributeError):
        return None
    folder = Path(unquote(url.path)).parent.name if url.scheme == "file" else ""
    return folder if folder.startswith(f"{EXTENSION}-") else None


def own_environment() -> bool:
    """Whether this interpreter runs in the environment `scripts/setup` made (its marker file at the root), the only
    one Maya installs into on its own."""
    return (Path(sys.prefix) / MARKER).is_file()


def install_command() -> str:
    """The command that installs Transformer Engine for this interpreter, wherever it runs."""
    return f"{sys.executable} -m {MODULE}"


def mode() -> str:
    """`$MAYA_TE_AUTO`: `build` (default: install, building the extension once if no wheel is cached), `cached`
    (install only from a cached wheel) or `off` (never install); ValueError for another value."""
    raw = (settings.TE_AUTO.get() or "build").lower()
    if raw not in MODES:
        raise ValueError(f"{settings.TE_AUTO.name}={raw!r} is not one of {', '.join(MODES)}")
    return raw


def requirements() -> list[str]:
    """The `te` extra's requirements, as Maya's installed metadata lists them (pyproject.toml is their one source);
    `Unavailable` without them."""
    try:
        listed = metadata.requires("maya") or []
    except metadata.PackageNotFoundError:
        listed = []
    found = []
    for requirement in listed:
        spec, _, marker = requirement.partition(";")
        if marker.strip().replace("'", '"') == f'extra == "{EXTRA}"':
            found.append(spec.strip())
    if not any(r.startswith(f"{CORE}[") for r in found):
        raise Unavailable(
            f"Maya's installed metadata (none where Maya runs from its sources alone) has no `{EXTRA}` extra pinning "
            f"{CORE}, so Transformer Engine cannot be installed for it: set Maya up with `{SETUP}`"
        )
    return found


def core_library() -> str:
    """The distribution of TE's core library that the `te` extra's pin selects (`transformer-engine[core-cu13]`:
    `transformer-engine-cu13`)."""
    pin = next(r for r in requirements() if r.startswith(f"{CORE}["))
    return f"{CORE}-{pin[len(CORE) + 1 : pin.index(']')].removeprefix('core-')}"


def version() -> str:
    """The Transformer Engine release the `te` extra pins (`transformer-engine[...]==X`), which the extension matches."""
    for requirement in requirements():
        if requirement.startswith(f"{CORE}[") and "==" in requirement:
            return requirement.split("==", 1)[1].strip()
    raise Unavailable(f"Maya's `{EXTRA}` extra does not pin {CORE} to one release (`==`): reinstall Maya")


def torch_pin() -> str:
    """The installed torch as a requirement, so that installing TE resolves around it rather than replacing it."""
    return f"torch=={metadata.version('torch')}"


def wheel_folder() -> Path:
    """Where the extension's wheel for this TE, torch and Python is cached:
    `$MAYA_HOME/wheels/transformer-engine-torch-<TE>-torch<torch>-cp<python>/`."""
    import torch  # its full version (`2.15.0+cu132`): the distribution's metadata drops the local label

    python = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return settings.home() / "wheels" / f"{EXTENSION}-{version()}-torch{torch.__version__}-{python}"


def build_prefix(folder: Path) -> str:
    """The name prefix of the wheel key `folder`'s temporary build folders beside it (its key in it: the lock is per
    key, so a build removes only its own key's leftovers)."""
    return f".{folder.name}.build-"


def failure_marker(folder: Path) -> Path:
    """Where a failed build or install for the wheel key `folder` is remembered (what failed, its log), for every
    process."""
    return folder.parent / f"{folder.name}.failed"


def cached_wheel(folder: Path) -> Path | None:
    """The wheel in `folder`, if a complete build put one there."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def imports_te(argv: Sequence[str]) -> bool:
    """Whether the script `argv` runs (`script.py args`; not `-m module`) imports Transformer Engine unconditionally:
    at module level or under `if __name__ == "__main__"`, outside a `try` (an import that is guarded, conditional or in
    a function is optional: Megatron's, `mpt.py`'s), or imports a module beside it (`from model import GPT`: `model.py`
    or `model/__init__.py` in the script's folder) that does so at its module level; deeper imports, and one in a
    function the script calls, are missed, and a rank that fails on such an import says how to install TE:
    `missing_hint`)."""
    script = Path(argv[0]) if argv and argv[0] != "-m" else None
    if script is None or not script.is_file():
        return False
    imported = _imported(script, as_script=True)
    if "transformer_engine" in imported:
        return True
    for name in imported:  # the script's own modules, one level
        for module in (script.parent / f"{name}.py", script.parent / name / "__init__.py"):
            if module.is_file() and "transformer_engine" in _imported(module, as_script=False):
                return True
    return False


def _imported(source: Path, *, as_script: bool) -> set[str]:
    """The top-level names of the modules `source` imports unconditionally (at module level, and under `if __name__ ==
    "__main__"` when run `as_script`); none when it does not parse (its own run reports it)."""
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (SyntaxError, ValueError):
        return set()

    def top_level(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif as_script and isinstance(node, ast.If) and _is_main_guard(node.test):
                yield from top_level(node.body)  # what a script runs as a script

    names: set[str] = set()
    for node in top_level(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif node.level == 0 and node.module:  # a relative import is a package's own
            names.add(node.module.split(".")[0])
    return names


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return {side.replace("'", '"') for side in sides} == {"__name__", '"__main__"'}


def missing_hint(reason: str) -> str | None:
    """How to install Transformer Engine, when a failed capture's `reason` is a rank's import of it that failed (an
    import the scan before the capture, `imports_te`, does not see)."""
    if "ModuleNotFoundError" not in reason or "'transformer_engine" not in reason:
        return None
    where = SETUP if own_environment() else f"`{install_command()}`"
    return (
        f"the script imports Transformer Engine, which is not installed for {sys.executable}: install it with {where}"
    )


def ensure(needed_by: str, *, explicit: bool = False) -> None:
    """Install Transformer Engine for this interpreter unless the one Maya pins is installed: if no wheel is cached,
    TE's core with the extension's build requirements (the `te` extra) and the extension's build into the cache; then
    TE with that wheel. `needed_by` names what needs it, for the messages. Automatically (as `mode()` allows) only
    into Maya's own environment and only while no earlier failure is remembered; `explicit` (the command asked for it)
    installs wherever this interpreter runs, building if needed, and retries a remembered failure. Raises
    `Unavailable`, naming the command that fixes it, when it is not allowed or fails (having uninstalled again the TE
    it installed, when no extension was installed before)."""
    allowed = "build" if explicit else mode()
    present = installed()
    if present and (allowed == "off" or not (explicit or own_environment()) or mismatch() is None):
        return  # the pinned TE, or one Maya may not replace here
    missing = (
        "which is not installed for this interpreter"
        if not present
        else f"whose installed version is not the one Maya installs ({mismatch()})"
    )
    command = SETUP if own_environment() else install_command()
    if allowed == "off":
        raise Unavailable(
            f"{needed_by} needs Transformer Engine's PyTorch extension, {missing}, and {settings.TE_AUTO.name}=off "
            f"refuses installing it: install it with `{command}`"
        )
    if not explicit and not own_environment():
        raise Unavailable(
            f"{needed_by} needs Transformer Engine's PyTorch extension, {missing}; Maya installs it on its own only into "
            f"the environment scripts/setup made, and {sys.prefix} is not that: install it there with "
            f"`{install_command()}` (Transformer Engine {version()} and its extension, resolved with the installed "
            f"{torch_pin()})"
        )
    folder = wheel_folder()
    folder.parent.mkdir(parents=True, exist_ok=True)
    retry = f"retry with `{command}`"
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        if not _try_lock(lock):
            _say(f"{needed_by} needs Transformer Engine: another process is installing it; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when every process holding the file has closed it or ended
        importlib.invalidate_caches()
        if installed() and mismatch() is None:  # the holder installed it meanwhile
            return
        for stale in folder.parent.glob(f"{build_prefix(folder)}*"):  # a killed build's of this key: ours to remove
            shutil.rmtree(stale, ignore_errors=True)
        failed = failure_marker(folder)
        if failed.is_file():
            if not explicit:
                raise Unavailable(
                    f"{needed_by} needs Transformer Engine's PyTorch extension, {missing}, and an earlier attempt to "
                    f"install it failed, so no process tries again on its own: {failed.read_text().strip()}\n"
                    f"({retry}, or delete {failed})"
                )
            failed.unlink()
        wheel = cached_wheel(folder)
        if wheel is None and allowed == "cached":
            raise Unavailable(
                f"{needed_by} needs Transformer Engine's PyTorch extension, and no built wheel is cached in {folder} "
                f"({settings.TE_AUTO.name}=cached refuses building it, about {BUILD_MINUTES_2_CORES} minutes on 2 "
                f"idle cores): build and install it with `{SETUP}`"
            )
        # what a failure undoes: TE installed here without its extension (an installed one is not Maya's to remove)
        undo = [] if present else _uninstall_command([CORE, core_library(), EXTENSION])
        job = _Job(lock, retry, undo)
        try:
            if wheel is None:
                _say(f"{needed_by} needs Transformer Engine {version()}: installing it and its extension's build needs")
                job.install([*requirements(), torch_pin()], f"Transformer Engine {version()} for its extension's build")
                wheel = _build(folder, job)
            _say(f"{needed_by} needs Transformer Engine {version()}: installing it with {wheel.name}")
            if _has_distribution(EXTENSION) and not _uses_uv():  # pip keeps an installed wheel of the same version
                job.run(_uninstall_command([EXTENSION]), f"the installed {EXTENSION}")
            job.install([*requirements(), torch_pin(), str(wheel)], f"Transformer Engine with {wheel.name}", True)
        except Unavailable as e:
            _remember(failed, str(e))
            raise
    importlib.invalidate_caches()
    if not installed():
        raise Unavailable(f"{wheel} installed, but its extension is not found for {sys.executable}; {retry}")
    if wrong := mismatch():  # else every later need would install it again
        raise Unavailable(f"{wheel} installed, but {wrong}; {retry}")
    _say(f"Transformer Engine {version()} is installed ({wheel})")


def _has_distribution(name: str) -> bool:
    """Whether `name`'s metadata is installed (its files on disk or not)."""
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _remember(marker: Path, message: str) -> None:
    """Write `message` to `marker` atomically (a reader sees none or all of it)."""
    partial = marker.with_name(f".{marker.name}.{os.getpid()}")
    partial.write_text(message + "\n")
    partial.replace(marker)


def _try_lock(lock) -> bool:
    """Take `lock` without waiting; False when another process holds it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _say(message: str) -> None:
    print(f"maya: {message}", file=sys.stderr, flush=True)


def _uses_uv() -> bool:
    return (Path(sys.executable).parent / "uv").is_file()


def _installer() -> list[str]:
    """uv beside this interpreter (what `scripts/setup` installs), without any project's uv settings (`--no-config`);
    else pip."""
    if _uses_uv():
        uv = str(Path(sys.executable).parent / "uv")
        return [uv, "pip", "install", "--quiet", "--compile-bytecode", "--no-config", "--python", sys.executable]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def _uninstall_command(names: list[str]) -> list[str]:
    """The installer's removal of the distributions `names` from this interpreter's environment (those installed)."""
    if _uses_uv():
        uv = str(Path(sys.executable).parent / "uv")
        return [uv, "pip", "uninstall", "--quiet", "--no-config", "--python", sys.executable, *names]
    return [sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "--disable-pip-version-check", *names]


class _Job:
    """Runs `ensure`'s installs and build under `SUPERVISOR`, holding `lock`, with `undo` run when one fails or Maya
    ends; a failure raises `Unavailable` naming `retry`."""

    def __init__(self, lock, retry: str, undo: list[str]):
        self.lock, self.retry, self.undo = lock, retry, undo

    def install(self, args: list[str], what: str, replace: bool = False) -> None:
        """Install `args`, with `replace` an installed extension replaced (uv's `--reinstall-package`; pip keeps an
        installed wheel of the same version, so `ensure` has pip uninstall it first)."""
        command = _installer()
        if replace and _uses_uv():
            command += ["--reinstall-package", EXTENSION]
        self.run([*command, *args], what)

    def run(self, command: list[str], what: str) -> None:
        """Run an installer's `command` outside any project (a neutral working directory)."""
        with tempfile.TemporaryDirectory(prefix="maya-te-") as neutral:
            log = Path(neutral) / "log"
            code = self.supervise(command, log, cwd=Path(neutral))
            if code:
                raise Unavailable(
                    f"installing {what} for Transformer Engine failed (exit {code}): "
                    f"{log.read_text(errors='replace').strip()[-1500:]}; {self.retry}"
                )

    def supervise(
        self, command: list[str], log: Path, *, cwd: Path, env: dict[str, str] | None = None, doing: str | None = None
    ) -> int:
        """Run `command` under the supervisor, its output into `log`, saying every `HEARTBEAT_S` that it is still
        `doing` that (if given); its exit code. Interrupted (Ctrl-C, a stop signal raised as an exception), it stops
        the supervisor, which kills the command and runs the undo (run here if the supervisor ended before it could),
        and waits for it."""
        started = time.monotonic()
        with open(log, "w") as out:
            supervisor = subprocess.Popen(
                [sys.executable, "-c", SUPERVISOR, str(os.getpid()), str(self.lock.fileno()), json.dumps(self.undo)]
                + command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,  # a terminal's Ctrl-C reaches Maya, which stops it
                pass_fds=(self.lock.fileno(),),
            )
            try:
                while True:
                    try:
                        return supervisor.wait(timeout=HEARTBEAT_S)
                    except subprocess.TimeoutExpired:
                        if doing:
                            _say(f"still {doing} ({(time.monotonic() - started) / 60:.0f} min so far)")
            except BaseException:
                supervisor.terminate()
                if supervisor.wait() < 0 and self.undo:  # killed by the signal before it could undo
                    subprocess.run(self.undo, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
                raise


def _build(folder: Path, job: _Job) -> Path:
    """Build the extension's wheel into a temporary folder beside `folder` and rename it to `folder` (a reader sees
    no wheel or a whole one), as `job`; its output goes to a log beside it, kept only when the build fails."""
    jobs = settings.MAX_JOBS.get() or "2"
    build = Path(tempfile.mkdtemp(prefix=build_prefix(folder), dir=folder.parent))
    log = folder.parent / f"{folder.name}.log"
    _say(
        f"building {EXTENSION} {version()} for {folder.name.split('-', 4)[-1]} once, cached in {folder}: about "
        f"{BUILD_MINUTES_2_CORES} minutes on 2 idle cores with MAX_JOBS={jobs} ({os.cpu_count()} cores here; longer "
        f"when they are busy); log: {log}; {settings.TE_AUTO.name}=cached refuses building"
    )
    started = time.monotonic()
    try:
        scratch = build / "tmp"  # pip's temporary folders, removed with the build's even when it is killed
        scratch.mkdir()
        env = {**_build_env(jobs), "TMPDIR": str(scratch)}
        code = job.supervise(_build_command(build), log, cwd=build, env=env, doing=f"building {EXTENSION}")
        shutil.rmtree(scratch, ignore_errors=True)
        wheel = cached_wheel(build)
        if code or wheel is None:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-LOG_TAIL:])
            raise Unavailable(
                f"{EXTENSION} {version()} did not build (exit {code}; log {log}, its end below); fix what it says and "
                f"{job.retry}\n{tail}"
            )
        shutil.rmtree(folder, ignore_errors=True)  # a folder without its wheel (removed by hand) is not a cache
        build.rename(folder)  # atomic; the lock means no one else built it meanwhile
    finally:
        shutil.rmtree(build, ignore_errors=True)
    log.unlink(missing_ok=True)
    _say(f"built {EXTENSION} in {(time.monotonic() - started) / 60:.1f} min")
    return cached_wheel(folder)


def _build_command(into: Path) -> list[str]:
    """pip's build of the extension's sdist into `into`, against the installed torch (whose ABI it must match): from
    the sdist only (`--no-binary`: a registry wheel is never taken for one built here) and compiled now
    (`--no-cache-dir`: pip's cache of wheels it built, keyed by the sdist alone, may hold one built for another
    torch)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-cache-dir",
        "--no-binary",
        EXTENSION,
        "--disable-pip-version-check",
        f"{EXTENSION}=={version()}",
        "-w",
        str(into),
    ]


def _build_env(jobs: str) -> dict[str, str]:
    """The build's environment: TE's PyTorch part only, from NVIDIA's wheels (no CUDA toolkit), compiled here."""
    return {
        **os.environ,
        "NVTE_FRAMEWORK": "pytorch",
        "NVTE_BUILD_USE_NVIDIA_WHEELS": "1",  # cuDNN, cuBLAS and NCCL headers from NVIDIA's wheels
        "NVTE_PYTORCH_FORCE_BUILD": "TRUE",  # no attempt to download a prebuilt wheel (built for another torch)
        "MAX_JOBS": jobs,
    }


def main() -> int:
    """`python -m maya.installer.transformer_engine`: installs Transformer Engine for the interpreter that runs it,
    building if needed and retrying a remembered failure, whatever `MAYA_TE_AUTO` says: the command asks for it (what
    `scripts/setup` runs with `MAYA_WITH_TE=1`, and what a refusal outside Maya's environment names)."""
    try:
        ensure(f"{MODULE}", explicit=True)
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
