"""Where Maya keeps things: the warehouse, captured runs, shipped data and the bundled example."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from . import settings


def maya_home() -> Path:
    """`$MAYA_HOME`, default `~/.maya`: the warehouse and captured runs live here."""
    return settings.home()


def warehouse_path() -> Path:
    """`$MAYA_WAREHOUSE`, default `$MAYA_HOME/warehouse.duckdb`: the embedded DuckDB warehouse."""
    return settings.warehouse()


def runs_dir() -> Path:
    return maya_home() / "runs"


def compile_cache_root() -> Path:
    """`$MAYA_EMULATOR_CACHE/compile`: emulated ranks' Inductor and Triton caches, one folder per key
    (`emulator.launcher.compile_cache`); deleting it only costs the next emulation its compile time."""
    return settings.emulator_cache() / "compile"


def data_dir() -> Path:
    """Data shipped with Maya: package data of `maya` (`src/maya/data/` in the source tree)."""
    return Path(str(files("maya") / "data"))


def example_script() -> Path:
    """The bundled example training script."""
    return Path(str(files("maya.examples") / "train_gpt.py"))


def write_atomic(path: Path, data: bytes) -> Path:
    """Write via a temporary file in the same directory, flushed to disk, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def folder_made_once(path: Path, marker: str, make: Callable[[Path], None], replaces: str | None = None) -> Path:
    """`path`, made by `make(partial)` once: under a lock beside it (other processes wait and reuse it), in a
    partial folder renamed into place, so it is there whole or not at all; `marker` is the file that says it is
    made. Whatever `make` raises leaves nothing behind. Once made, the sibling folders it supersedes (names
    matching the glob `replaces`, whole or partial) are removed, each only when no other process holds its lock."""
    if (path / marker).is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(path), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / marker).is_file():
            partial = _partial_path(path)
            shutil.rmtree(partial, ignore_errors=True)  # a killed maker's leftovers: no one else holds the lock
            try:
                make(partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            shutil.rmtree(path, ignore_errors=True)  # a folder without its marker is not one
            partial.rename(path)
            if replaces is not None:
                _remove_superseded(path, replaces)
    return path


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _partial_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def _remove_superseded(path: Path, pattern: str) -> None:
    """Remove `path`'s siblings named like `pattern` and their partial folders, skipping any whose lock another
    process holds (it is making or remaking it). Their lock files stay: removing one that another process has
    opened would let two makers hold different locks for one folder."""
    names = {p.name for p in path.parent.glob(pattern) if p.is_dir()}
    names |= {p.name[1 : -len(".partial")] for p in path.parent.glob(f".{pattern}.partial") if p.is_dir()}
    for name in sorted(names - {path.name}):
        other = path.with_name(name)
        with open(_lock_path(other), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(other, ignore_errors=True)
            shutil.rmtree(_partial_path(other), ignore_errors=True)
