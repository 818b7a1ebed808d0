"""A measured machine's own collectives inside one node, as curves of time over message size
(`data/collectives/measured.json`), for pricing a cluster whose spec says it is that machine (`measured_as`).

Built from Vidur's measured NCCL times (`maya.estimators.collective_data`) per machine, collective and GPU count on
one node: the rows' median time per quarter octave of size (never decreasing: a larger message never takes less),
and a straight line (Theil-Sen) through the rows of the largest two octaves (`time = a + size x factor / bus bandwidth`) whose bus
bandwidth carries the curve past its largest measured size. Multi-node rows are left out: their network is not
the one any cluster spec describes. Curves that copy another machine's value for value are left out too. Each
machine keeps the nodes it was (its `reference`: GPU, GPUs per node, NVLink fabric, from its cluster spec in
`collective_data.VIDUR_CLUSTERS`), which a cluster measured as it must match (`maya.core.clusters.measured_machines`).

Written with the fit, from the same dataset: `python -m maya.estimators.collective_fit`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.clusters import MeasuredMachine, measured_machines_path
from maya.estimators.collective_params import read_fitted

FORMAT = "maya-collective-measured/2"
KNOTS_PER_OCTAVE = 4
"""Knots of a curve per doubling of the message size (each the median of the rows it spans)."""
MEASURED = ("allreduce", "sendrecv")
"""The collectives a curve may hold: what the handed measurements timed."""
LARGE_OCTAVES = 2
"""Octaves below the largest measured size whose rows give the bus bandwidth past it (a Theil-Sen line: robust to
the steps a curve takes where NCCL changes its chunking)."""
MIN_ROWS = 16
"""Fewest rows a curve is built from."""


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, else 1."""
    return {
        "allreduce": 2 * (ranks - 1) / ranks,
        "allgather": (ranks - 1) / ranks,
        "reducescatter": (ranks - 1) / ranks,
    }.get(collective, 1.0)


@dataclass(frozen=True)
class MeasuredCurve:
    """One collective on `ranks` GPUs of one node of a measured machine."""

    collective: str
    ranks: int
    sizes: tuple[float, ...]
    """Knot sizes in bytes, increasing."""
    us: tuple[float, ...]
    """Median microseconds at each knot, increasing."""
    large_bus_gbs: float
    """Bus bandwidth of the largest measured octaves: what each byte past the largest knot costs."""
    rows: int

    def time_us(self, nbytes: np.ndarray, max_bus_gbs: float = np.inf) -> np.ndarray:
        """Microseconds of each size: interpolated in log size and log time between knots, the first knot's time
        below it, and past the last knot its time plus the extra bytes at `large_bus_gbs`, or at `max_bus_gbs`
        (the links' line rate) where that is lower."""
        size = np.asarray(nbytes, dtype="float64")
        knots, times = np.log(self.sizes), np.log(self.us)
        inside = np.exp(np.interp(np.log(np.maximum(size, 1.0)), knots, times))
        slope = bus_factor(self.collective, self.ranks) / (min(self.large_bus_gbs, max_bus_gbs) * 1e3)  # us per byte
        beyond = self.us[-1] + (size - self.sizes[-1]) * slope
        return np.where(size > self.sizes[-1], beyond, inside)


@dataclass(frozen=True)
class MeasuredCollectives:
    """Curves per measured machine (Vidur's network names), keyed by (collective, ranks), and the nodes each
    machine was."""

    machines: dict[str, dict[tuple[str, int], MeasuredCurve]]
    references: dict[str, MeasuredMachine] = field(default_factory=dict)
    """The nodes each machine was (needed to write the curves)."""
    provenance: dict = field(default_factory=dict, compare=False)

    def curve(self, machine: str, collective: str, ranks: int) -> MeasuredCurve | None:
        return self.machines.get(machine, {}).get((collective, ranks))

    def counts(self, machine: str, collective: str) -> list[int]:
        """The GPU counts `machine` measured `collective` on, increasing."""
        return sorted(r for c, r in self.machines.get(machine, {}) if c == collective)

    def to_json(self) -> dict:
        machines = {
            m: {
                "reference": self.references[m].to_json(),
                "curves": {
                    f"{c.collective}/{c.ranks}": {
                        "bytes": list(c.sizes),
                        "us": list(c.us),
                        "large_bus_gbs": c.large_bus_gbs,
                        "rows": c.rows,
                    }
                    for c in curves.values()
                },
            }
            for m, curves in self.machines.items()
        }
        return {"format": FORMAT, "machines": machines, "provenance": self.provenance}

    @classmethod
    def from_json(cls, raw: dict) -> MeasuredCollectives:
        if raw.get("format") != FORMAT:
            raise ValueError(f"measured collectives of format {raw.get('format')!r}, expected {FORMAT!r}")
        machines, references = {}, {}
        for machine, entry in raw["machines"].items():
            machines[machine], references[machine] = {}, MeasuredMachine(**entry["reference"])
            for key, c in entry["curves"].items():
                collective, ranks = key.split("/")
                curve = MeasuredCurve(
                    collective, int(ranks), tuple(map(float, c["bytes"])), tuple(map(float, c["us"])),
                    float(c["large_bus_gbs"]), int(c["rows"])
                )  # fmt: skip
                machines[machine][collective, int(ranks)] = curve
        return cls(machines, references, raw.get("provenance", {}))


def build(frame: pd.DataFrame) -> MeasuredCollectives:
    """Curves of every one-node measured collective of `frame` (`collective_data.load_collectives`'s layout), without
    their machines' references (`collective_fit` adds them before writing)."""
    rows = frame[(frame["nodes"] == 1) & frame["duplicate_of"].isna() & frame["collective"].isin(MEASURED)]
    machines: dict[str, dict[tuple[str, int], MeasuredCurve]] = {}
    for (machine, collective, ranks), part in rows.groupby(["network", "collective", "ranks"], sort=True):
        if len(part) >= MIN_ROWS:
            machines.setdefault(str(machine), {})[str(collective), int(ranks)] = _curve(
                str(collective), int(ranks), part
            )
    return MeasuredCollectives(machines)


def _curve(collective: str, ranks: int, part: pd.DataFrame) -> MeasuredCurve:
    from scipy.stats import theilslopes  # fit time only: pricing reads the stored curves and never imports SciPy

    size, us = part["bytes"].to_numpy(dtype="float64"), part["measured_us"].to_numpy(dtype="float64")
    knot = np.floor(np.log2(size) * KNOTS_PER_OCTAVE)
    grouped = pd.DataFrame({"knot": knot, "log_size": np.log(size), "us": us}).groupby("knot").median()
    times = np.maximum.accumulate(grouped["us"].to_numpy())
    times = times * (1 + 1e-6) ** np.arange(len(times))  # strictly increasing where the medians tie
    top = size >= size.max() / 2**LARGE_OCTAVES
    slope = theilslopes(us[top], size[top])[0] if np.unique(size[top]).size >= 2 else 0.0
    if not slope > 0:
        raise ValueError(f"{collective} on {ranks} GPUs: its largest octave does not grow with size")
    return MeasuredCurve(
        collective,
        ranks,
        tuple(np.exp(grouped["log_size"]).round(1).tolist()),
        tuple(times.tolist()),
        bus_factor(collective, ranks) / slope / 1e3,
        len(part),
    )


def shipped_path() -> Path:
    return measured_machines_path()


@functools.cache
def shipped_measured() -> MeasuredCollectives:
    """The curves built from the shipped measurements (`data/collectives/measured.json`)."""
    return read_fitted(shipped_path(), MeasuredCollectives.from_json, "the measured collectives")
