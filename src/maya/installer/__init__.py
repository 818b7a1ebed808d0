"""Installing into Maya's own environment what some scripts need and `scripts/setup` leaves out (Transformer Engine,
on first need) or can only install without its CUDA build (flash-attn's, grouped_gemm's and MegaBlocks' Python
code, whose extensions emulated ranks find as stand-ins). Outside the predictor's sources
(`maya.api.PREDICTOR_SOURCES`): editing an installer re-predicts nothing."""

from __future__ import annotations

import importlib.metadata


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` (None: not installed)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
