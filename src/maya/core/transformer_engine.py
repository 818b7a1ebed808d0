"""Transformer Engine for the interpreter that runs Maya: found, or installed the first time something needs it.

The registry has no `transformer-engine-torch` wheel (TE's PyTorch extension) for Maya's torch, so its sdist is built
once against the installed torch (about 10 minutes on 2 idle cores) into `$MAYA_HOME/wheels/<key>/`, renamed into place
when complete, and every later install with the same TE, torch and Python installs that wheel in seconds. `ensure`
is the one route: `scripts/setup` with `MAYA_WITH_TE=1` runs it (`python -m maya.core.transformer_engine`), and so
do an `amp_fp8` MPT row and `maya emulate` of a script that imports TE, so that they run after the plain setup.
`MAYA_TE_AUTO` (`build`, `cached`, `off`) says how far the automatic route may go.

Processes share the work through a lock file beside the wheels: one installs (or builds), the others wait and find
it installed. A build compiles into a temporary folder that an interrupted build leaves behind and the next holder of
the lock removes; the extension's wheel is installed last, so TE counts as installed only once everything is.
"""

from __future__ import annotations

import ast
import fcntl
import importlib.machinery
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

from maya.core import settings

SETUP = "MAYA_WITH_TE=1 scripts/setup"
"""The command that installs Transformer Engine by hand (and retries a failed build)."""
EXTRA = "te"
"""Maya's extra that lists TE's Python packages and the extension's build and run requirements."""
EXTENSION = "transformer-engine-torch"
BUILD_MINUTES_2_CORES = 10
"""The extension's build on 2 idle cores (`MAX_JOBS=2`, 33 C++ files), measured on 2026-11-29 in a fresh clone; several
times longer on busy cores."""
MODES = ("build", "cached", "off")
HEARTBEAT_S = 60.0
"""How often a running build says on stderr that it is still running."""
LOG_TAIL = 30
"""Lines of a failed build's log shown in its error."""

_failed: dict[str, str] = {}
"""Builds that failed in this process, by wheel folder: their error, raised again instead of building again."""


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
    if not any(r.startswith("transformer-engine[") for r in found):
        raise Unavailable(
            f"Maya's installed metadata (none where Maya runs from its sources alone) has no `{EXTRA}` extra pinning "
            f"transformer-engine, so Transformer Engine cannot be installed for it: set Maya up with `{SETUP}`"
        )
    return found


def version() -> str:
    """The Transformer Engine release the `te` extra pins (`transformer-engine[...]==X`), which the extension matches."""
    for requirement in requirements():
        if requirement.startswith("transformer-engine[") and "==" in requirement:
            return requirement.split("==", 1)[1].strip()
    raise Unavailable(f"Maya's `{EXTRA}` extra does not pin transformer-engine to one release (`==`): reinstall Maya")


def wheel_folder() -> Path:
    """Where the extension's wheel for this TE, torch and Python is cached:
    `$MAYA_HOME/wheels/transformer-engine-torch-<TE>-torch<torch>-cp<python>/`."""
    import torch  # its full version (`2.15.0+cu132`): the distribution's metadata drops the local label

    python = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return settings.home() / "wheels" / f"{EXTENSION}-{version()}-torch{torch.__version__}-{python}"


def cached_wheel(folder: Path) -> Path | None:
    """The wheel in `folder`, if a complete build put one there."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def imports_te(argv: Sequence[str]) -> bool:
    """Whether the script `argv` runs (`script.py args`; not `-m module`) imports Transformer Engine unconditionally:
    at module level or under `if __name__ == "__main__"`, outside a `try` (an import that is guarded, conditional or in
    a function is optional: Megatron's, `mpt.py`'s)."""
    script = Path(argv[0]) if argv and argv[0] != "-m" else None
    if script is None or not script.is_file():
        return False
    try:
        tree = ast.parse(script.read_bytes(), filename=str(script))
    except (SyntaxError, ValueError):
        return False  # the script's own run reports it

    def top_level(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"':
                yield from top_level(node.body)  # what a script runs as a script

    for node in top_level(tree.body):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = [node.module or ""] if node.level == 0 else []  # a relative import is the script's own
        if any(name.split(".")[0] == "transformer_engine" for name in names):
            return True
    return False


def ensure(needed_by: str) -> None:
    """Install Transformer Engine for this interpreter unless it is installed, as `mode()` allows: the `te` extra's
    packages, then the extension's wheel from the cache, built there first if there is none. `needed_by` names what
    needs it, for the messages. Raises `Unavailable`, naming the command that fixes it, when it is not allowed or fails."""
    if installed():
        return
    allowed = mode()
    if allowed == "off":
        raise Unavailable(
            f"{needed_by} needs Transformer Engine's PyTorch extension, which is not installed for this interpreter, "
            f"and {settings.TE_AUTO.name}=off refuses installing it: install it with `{SETUP}`"
        )
    folder = wheel_folder()
    if str(folder) in _failed:
        raise Unavailable(_failed[str(folder)])
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{EXTENSION}.lock", "w") as lock:
        if not _try_lock(lock):
            _say(f"{needed_by} needs Transformer Engine: another process is installing it; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a killed holder's process ends
        if installed():  # the holder installed it meanwhile
            return
        for stale in folder.parent.glob(f".{EXTENSION}-build-*"):  # a killed build's: no one else holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        wheel = cached_wheel(folder)
        if wheel is None and allowed == "cached":
            raise Unavailable(
                f"{needed_by} needs Transformer Engine's PyTorch extension, and no built wheel is cached in {folder} "
                f"({settings.TE_AUTO.name}=cached refuses building it, about {BUILD_MINUTES_2_CORES} minutes on 2 "
                f"idle cores): build and install it with `{SETUP}`"
            )
        _say(f"{needed_by} needs Transformer Engine {version()}: installing Maya's `{EXTRA}` extra")
        _install(list(requirements()), "the `te` extra's packages")
        if wheel is None:
            try:
                wheel = _build(folder)
            except Unavailable as e:
                _failed[str(folder)] = str(e)
                raise
        _install(["--no-deps", "--reinstall-package", EXTENSION, str(wheel)], wheel.name)
    importlib.invalidate_caches()
    if not installed():
        raise Unavailable(
            f"{wheel} installed, but its extension is not found for {sys.executable}; retry with `{SETUP}`"
        )
    _say(f"Transformer Engine {version()} is installed ({wheel})")


def _try_lock(lock) -> bool:
    """Take `lock` without waiting; False when another process holds it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _say(message: str) -> None:
    print(f"maya: {message}", file=sys.stderr, flush=True)


def _installer() -> list[str]:
    """uv beside this interpreter (what `scripts/setup` installs), else pip."""
    uv = Path(sys.executable).parent / "uv"
    if uv.is_file():
        return [str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def _install(args: list[str], what: str) -> None:
    """Install `args` into this interpreter's environment; `Unavailable` with the installer's error if it fails."""
    done = subprocess.run([*_installer(), *args], capture_output=True, text=True)
    if done.returncode:
        raise Unavailable(
            f"installing {what} for Transformer Engine failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-1500:]}; retry with `{SETUP}`"
        )


def _build(folder: Path) -> Path:
    """Build the extension's wheel into a temporary folder beside `folder` and rename it to `folder` (a reader sees
    no wheel or a whole one); its output goes to a log beside it, kept only when the build fails."""
    jobs = settings.MAX_JOBS.get() or "2"
    build = Path(tempfile.mkdtemp(prefix=f".{EXTENSION}-build-", dir=folder.parent))
    log = folder.parent / f"{folder.name}.log"
    _say(
        f"building {EXTENSION} {version()} for {folder.name.split('-', 4)[-1]} once, cached in {folder}: about "
        f"{BUILD_MINUTES_2_CORES} minutes on 2 idle cores with MAX_JOBS={jobs} ({os.cpu_count()} cores here; longer "
        f"when they are busy); log: {log}; {settings.TE_AUTO.name}=cached refuses building"
    )
    started = time.monotonic()
    try:
        with open(log, "w") as out:
            child = subprocess.Popen(
                _build_command(build),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_build_env(jobs),
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        code = child.wait(timeout=HEARTBEAT_S)
                        break
                    except subprocess.TimeoutExpired:
                        _say(f"still building {EXTENSION} ({(time.monotonic() - started) / 60:.0f} min so far)")
            except BaseException:  # Ctrl-C, a stop signal raised as an exception: the compilers stop with pip
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                raise
        wheel = cached_wheel(build)
        if code or wheel is None:
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-LOG_TAIL:])
            raise Unavailable(
                f"{EXTENSION} {version()} did not build (exit {code}; log {log}, its end below); fix what it says and "
                f"retry with `{SETUP}`\n{tail}"
            )
        shutil.rmtree(folder, ignore_errors=True)  # a folder without its wheel (removed by hand) is not a cache
        build.rename(folder)  # atomic; the lock means no one else built it meanwhile
    finally:
        shutil.rmtree(build, ignore_errors=True)
    log.unlink(missing_ok=True)
    _say(f"built {EXTENSION} in {(time.monotonic() - started) / 60:.1f} min")
    return cached_wheel(folder)


def _build_command(into: Path) -> list[str]:
    """pip's build of the extension's sdist into `into`, against the installed torch (whose ABI it must match)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
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
    """`python -m maya.core.transformer_engine`: what `scripts/setup` runs with `MAYA_WITH_TE=1` (builds if needed,
    whatever `MAYA_TE_AUTO` says: the command asks for it)."""
    os.environ[settings.TE_AUTO.name] = "build"
    try:
        ensure("scripts/setup with MAYA_WITH_TE=1")
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
