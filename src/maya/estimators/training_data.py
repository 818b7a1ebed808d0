"""Training data shipped with Maya: NeuSight's measured kernels and measured profiling campaigns."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from maya.core.paths import data_dir

from .neusight_data import load_kernels, neusight_dir
from .profile_data import load_profiles


def profiles_dir() -> Path:
    return data_dir() / "profiles"


def shipped_measurements(*, neusight: bool = True, profiles: Path | None = None) -> pd.DataFrame:
    """NeuSight's training split and every measured run under `profiles` (default `data/profiles/`)."""
    frames = [load_kernels(neusight_dir() / "kernels_train.parquet")] if neusight else []
    frames.append(load_profiles(profiles or profiles_dir()))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


__all__ = ["load_kernels", "load_profiles", "neusight_dir", "profiles_dir", "shipped_measurements"]
