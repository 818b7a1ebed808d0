"""Where Maya keeps things: the warehouse, captured runs, shipped data and the bundled example."""

from __future__ import annotations

import os
import tempfile
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
