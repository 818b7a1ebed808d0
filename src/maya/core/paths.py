"""Where Maya keeps things: the warehouse, captured runs, shipped data and the bundled example."""

from __future__ import annotations

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
