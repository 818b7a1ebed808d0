"""Training data shipped with Maya: NeuSight's measured kernels, Vidur's measured operators and measured
profiling campaigns, each a `Source` with the rows it leaves out and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from maya.core.paths import data_dir

from .neusight_data import FAMILY_OF_OP, load_kernels, neusight_dir
from .profile_data import load_profiles
from .vidur_data import load_compute, vidur_dir

SOURCES = ("neusight", "vidur", "profiles")


@dataclass(frozen=True)
class Source:
    name: str
    calls: pd.DataFrame
    """Measured calls (call-frame columns, `measured_ns`, `timing`)."""
    rejected: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Bad rows with a `reason`: never trained on."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Valid rows that are not kernel calls Maya models, counted by kind."""


def profiles_dir() -> Path:
    return data_dir() / "profiles"


def shipped_sources(*, neusight: bool = True, vidur: bool = True, profiles: Path | None = None) -> list[Source]:
    """Every shipped source chosen: NeuSight's training split, Vidur's compute profiles and the measured runs
    under `profiles` (default `data/profiles/`), in that order; sources without rows are left out."""
    sources = []
    if neusight:
        path = neusight_dir() / "kernels_train.parquet"
        ops = pd.read_parquet(path, columns=["op"])["op"]
        other = ops[~ops.isin(list(FAMILY_OF_OP))].value_counts()
        sources.append(
            Source(
                "neusight",
                load_kernels(path),
                left_out={f"{op} rows (no {op} family)": int(n) for op, n in other.items()},
            )
        )
    if vidur:
        checked = load_compute(vidur_dir() / "compute.parquet")
        sources.append(Source("vidur", checked.calls, checked.rejected, checked.left_out))
    sources.append(Source("profiles", load_profiles(profiles or profiles_dir())))
    return [s for s in sources if len(s.calls) or len(s.rejected)]


def shipped_measurements(*, neusight: bool = True, vidur: bool = True, profiles: Path | None = None) -> pd.DataFrame:
    """The calls of every chosen shipped source (`shipped_sources`), with their `source`."""
    frames = [
        s.calls if "source" in s.calls else s.calls.assign(source=s.name)
        for s in shipped_sources(neusight=neusight, vidur=vidur, profiles=profiles)
        if len(s.calls)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rows_by_source(sources: list[Source]) -> pd.DataFrame:
    """Rows per source and hardware (catalog name): used, rejected (quarantined) and left out."""
    from maya.core import hardware

    def catalog(name: str) -> str:
        try:
            return hardware.get(name).name
        except hardware.UnknownHardware:
            return name

    parts = []
    for source in sources:
        if len(source.calls):
            used = source.calls["hardware"].astype(str).map(catalog).value_counts()
            parts.append(pd.DataFrame({"source": source.name, "hardware": used.index, "rows": used.to_numpy()}))
        if len(source.rejected):
            column = "device" if "device" in source.rejected else "hardware"
            bad = (
                source.rejected[column].astype(str).value_counts()
                if column in source.rejected
                else pd.Series({"?": len(source.rejected)})
            )
            parts.append(pd.DataFrame({"source": source.name, "hardware": bad.index, "rejected": bad.to_numpy()}))
    if not parts:
        return pd.DataFrame(columns=["source", "hardware", "rows", "rejected"])
    table = pd.concat(parts).groupby(["source", "hardware"], sort=False).sum(min_count=1).reset_index()
    for column in ("rows", "rejected"):
        table[column] = table[column].fillna(0).astype("int64") if column in table else 0
    return table


__all__ = [
    "SOURCES",
    "Source",
    "load_kernels",
    "load_profiles",
    "neusight_dir",
    "profiles_dir",
    "rows_by_source",
    "shipped_measurements",
    "shipped_sources",
]
