"""One atomic cache of emulated runs, keyed by a command hash: `<root>/<key>/` is a complete run. A capture is
written under a hidden temporary name and renamed into place once complete, so a run under its key is never
partial; a capture that did not complete is kept as `<root>/<key>.failed/` for its logs (the next capture
of the key tries again). Also the one summary of why an emulation did not complete (`failure_summary`)."""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import maya
from maya.core.digest import files_digest

if TYPE_CHECKING:
    from .launcher import EmulationResult

REASON_CHARS = 600
"""Longest failure summary: the exception's type and message, not the whole traceback."""
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


@dataclass(frozen=True)
class Cached:
    """A run of the cache: where it is, whether it was there before, and the emulation (None when reused)."""

    run_dir: Path
    reused: bool
    result: EmulationResult | None


class CaptureCache:
    """Complete runs under `root`, one per key; failed captures beside them as `<key>.failed/`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        """Where the complete run of `key` is (or will be)."""
        if not _KEY.match(key):
            raise ValueError(f"capture cache key {key!r} is not a plain name (letters, digits, '-' and '_')")
        return self.root / key

    def failed_path(self, key: str) -> Path:
        """Where the last capture of `key` that did not complete is kept."""
        return self.root / f"{self.path(key).name}.failed"

    def lookup(self, key: str) -> Path | None:
        """The complete run of `key`, or None."""
        run_dir = self.path(key)
        return run_dir if run_dir.is_dir() and _complete(run_dir) else None

    def capture(self, key: str, emulate: Callable[[Path], EmulationResult]) -> Cached:
        """The run of `key`: the cached one, else `emulate(partial)` into a hidden folder renamed to the key once
        complete (or to `<key>.failed` when not). A concurrent capture of the same key that landed first wins."""
        found = self.lookup(key)
        if found is not None:
            return Cached(found, True, None)
        run_dir = self.path(key)
        self.root.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".partial", dir=self.root))
        try:
            result = emulate(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if result.status != "complete":
            failed = self.failed_path(key)
            shutil.rmtree(failed, ignore_errors=True)
            partial.rename(failed)
            result.run_dir = failed
            return Cached(failed, False, result)
        if run_dir.exists() and not _complete(run_dir):  # unreadable leftovers under the key: captured anew
            shutil.rmtree(run_dir)
        try:
            partial.rename(run_dir)
        except OSError:  # another capture of the same key landed meanwhile: keep its run
            if not _complete(run_dir):
                raise
            shutil.rmtree(partial)
            return Cached(run_dir, True, None)
        result.run_dir = run_dir
        return Cached(run_dir, False, result)


@lru_cache(maxsize=1)
def emulator_digest() -> str:
    """Of the emulator's source, the rest of Maya's modules it imports, and Maya's version: part of every cache
    key, so a changed emulator (deduplication's stage rebuild in `maya.core` included) captures anew."""
    package = Path(maya.__file__).parent
    root = Path(__file__).parent
    files = [*sorted(root.rglob("*.py")), *sorted((root / "native").glob("*.[ch]*"))]
    files += sorted(imported_outside(files, package, root))
    return files_digest(maya.__version__, [(path, package) for path in files])


def imported_outside(files: list[Path], package: Path, inside: Path) -> set[Path]:
    """Maya's module files outside `inside` that `files` import, directly or through each other, absolute or
    relative imports, at any depth of the source (read with `ast`, nothing imported)."""
    found: set[Path] = set()
    todo = [path for path in files if path.suffix == ".py"]
    while todo:
        path = todo.pop()
        here = path.relative_to(package).parent.parts
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[tuple[str, ...]] = []
            if isinstance(node, ast.Import):
                names = [tuple(alias.name.split(".")) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = tuple((node.module or "").split(".")) if node.module else ()
                if node.level:
                    base = ("maya", *here[: len(here) - node.level + 1], *base)
                names = [base] + [(*base, alias.name) for alias in node.names]
            for name in names:
                if name[:1] != ("maya",):
                    continue
                for depth in range(1, len(name) + 1):  # a module and the packages above it, whose __init__ runs
                    parts = name[1:depth]
                    for candidate in (
                        package.joinpath(*parts, "__init__.py"),
                        package.joinpath(*parts).with_suffix(".py"),
                    ):
                        if candidate.is_file() and inside not in candidate.parents and candidate not in found:
                            found.add(candidate)
                            todo.append(candidate)
    return found


@lru_cache(maxsize=1)
def installed_packages() -> str:
    """Digest of every distribution installed for this interpreter, by name and version (torch, Triton, Transformer
    Engine however it was built, the script's own libraries): part of capture keys, since a release changes what a
    script issues. Read from the installed metadata, nothing imported."""
    from importlib import metadata

    found = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]})
    return hashlib.sha256("\n".join(found).encode()).hexdigest()[:16]


def _complete(run_dir: Path) -> bool:
    from maya_trace_spec import Run

    try:
        return Run(run_dir).info["status"] == "complete"
    except Exception:  # noqa: BLE001 - an unreadable run is not a complete one
        return False


def failure_summary(result: EmulationResult) -> str:
    """Why an emulation did not complete, in one line: out of memory (with the peak), else the first failed
    rank's exception (type and message), else the tail of its log."""
    logs = result.run_dir / "logs"
    if result.status == "oom":
        peak = max((r.peak_bytes for r in result.ranks), default=0)
        return f"out of memory while emulating (peak {peak / 2**30:.1f} GiB); logs in {logs}"
    error = next((r.error for r in result.ranks if r.error), None)
    message = exception_message(error) if error else _log_tail(logs)
    return f"emulation {result.status}: {message}"[:REASON_CHARS]


def exception_message(error: str) -> str:
    """A failed rank's exception, type and whole message (which may span lines), from its traceback; else
    the traceback's last line."""
    lines = error.strip().splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if _EXCEPTION_LINE.match(lines[i])), len(lines) - 1)
    return " ".join(line.strip() for line in lines[start:])[:2000]


def _log_tail(logs: Path) -> str:
    files = sorted(logs.glob("rank*.txt"))
    if not files:
        return "the script failed (no log)"
    lines = [line for line in files[0].read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "the script failed (empty log)"
