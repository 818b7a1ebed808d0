"""Model discrepancy: how far a whole prediction falls from the truth beyond what the estimators' held-out
residuals see (a mechanism the models lack moves every call the same way, which no kernel residual measures).

It widens the 10-90% band (`maya.simulator.band`) of a predicted time `p` whose residual band is [low, high]:

    high' = p x exp(sqrt(ln(high / p)^2 + d_high^2)),  low' = p x exp(-sqrt(ln(p / low)^2 + d_low^2))

the two errors taken as independent at the same percentile (exact for normal log errors). `d_low`, `d_high` are
set by split conformal calibration on one validation suite's measured rows (`calibrate`): the smallest widths
that put at most 10% of that suite's rows above the band and 10% below it (with the finite-sample correction).
The point prediction never changes; only the band's width does, and it is judged on another suite
(`benchmarks/band_calibration.py`). Shipped as `data/band/discrepancy.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from maya.core.paths import data_dir

FORMAT = "maya-band-discrepancy/1"
MISS = 0.1
"""Share of rows a calibrated band may leave on each side (a 10-90% band)."""


@dataclass(frozen=True)
class Discrepancy:
    low: float
    """Log width added below the prediction at the 10th percentile."""
    high: float
    """Log width added above the prediction at the 90th percentile."""
    provenance: dict = field(default_factory=dict, compare=False)
    """Calibration suite, rows, and the coverage checked on another suite; not used to widen."""

    def __post_init__(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low >= 0 and self.high >= 0):
            raise ValueError(f"discrepancy widths must be finite and >= 0, got low={self.low}, high={self.high}")

    def widen(self, center: float, low: float, high: float) -> tuple[float, float]:
        """The band [low, high] around `center` with the discrepancy added in quadrature."""
        return widen(center, low, high, self.low, self.high)

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, raw: dict) -> Discrepancy:
        if raw.get("format") != FORMAT:
            raise ValueError(f"model discrepancy of format {raw.get('format')!r}, expected {FORMAT!r}")
        return cls(float(raw["low"]), float(raw["high"]), raw.get("provenance", {}))


NONE = Discrepancy(0.0, 0.0)


def widen(center, low, high, d_low: float, d_high: float):
    """`low` and `high` (scalars or arrays) around `center` widened by the log widths `d_low`, `d_high`."""
    center, low, high = (np.asarray(x, dtype="float64") for x in (center, low, high))
    below = np.log(center / np.minimum(low, center))
    above = np.log(np.maximum(high, center) / center)
    new_low = center * np.exp(-np.hypot(below, d_low))
    new_high = center * np.exp(np.hypot(above, d_high))
    if new_low.ndim == 0:
        return float(new_low), float(new_high)
    return new_low, new_high


def narrow(center, low, high, d_low, d_high):
    """The inverse of `widen`: the residual band a widened one was built from (per row widths allowed)."""
    center, low, high = (np.asarray(x, dtype="float64") for x in (center, low, high))
    below = np.sqrt(np.maximum(np.log(center / low) ** 2 - np.asarray(d_low) ** 2, 0.0))
    above = np.sqrt(np.maximum(np.log(high / center) ** 2 - np.asarray(d_high) ** 2, 0.0))
    return center * np.exp(-below), center * np.exp(above)


def calibrate(predicted, low, high, measured, *, miss: float = MISS) -> tuple[float, float]:
    """Split conformal widths (d_low, d_high): per row the smallest width that brings its measured time into
    its residual band [low, high] on that side (0 when inside), then the ceil((n + 1)(1 - miss))-th smallest
    of each side, so at most `miss` of exchangeable new rows fall outside on each side."""
    predicted, low, high, measured = (np.asarray(x, dtype="float64") for x in (predicted, low, high, measured))
    if not len(predicted) or not (np.isfinite(predicted).all() and np.isfinite(measured).all()):
        raise ValueError("calibration needs at least one row with a finite prediction and measurement")
    error = np.log(measured / predicted)
    above, below = np.log(high / predicted), np.log(predicted / low)
    need_high = np.where(error > above, np.sqrt(np.maximum(error**2 - above**2, 0.0)), 0.0)
    need_low = np.where(-error > below, np.sqrt(np.maximum(error**2 - below**2, 0.0)), 0.0)
    n = len(error)
    rank = min(math.ceil((n + 1) * (1 - miss)), n)
    return float(np.sort(need_low)[rank - 1]), float(np.sort(need_high)[rank - 1])


def shipped_path() -> Path:
    return data_dir() / "band" / "discrepancy.json"


@lru_cache(maxsize=1)
def shipped_discrepancy() -> Discrepancy:
    """The widths calibrated for the shipped estimators (`data/band/discrepancy.json`)."""
    path = shipped_path()
    try:
        return Discrepancy.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: cannot read the band's model discrepancy ({e}); rebuild it with "
            "`python benchmarks/band_calibration.py --write`"
        ) from None
