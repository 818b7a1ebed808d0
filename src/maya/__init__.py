"""Maya: how fast, how much memory, how much money, and which training configuration is best.

`maya.open_run`, `maya.capture`, `maya.predict`, `maya.record`, `maya.EmulateOptions` and `maya.PredictOptions`
(`maya.api`) are imported on first use (PEP 562), so `import maya` stays light: it imports no torch."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("maya")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

API = ("EmulateOptions", "PredictOptions", "capture", "open_run", "predict", "record")
"""What `maya` re-exports from `maya.api`."""
__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:  # imported by name: every stage imports `maya` (its version), none of them imports maya.api
        return getattr(import_module("maya.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
