"""The band's calibrated width: how far a whole prediction falls from the truth, judged on measured suites.

The estimators' held-out residuals (`maya.simulator.band`'s replays) cannot see a mechanism the models lack, and
they do not rank a prediction's end-to-end error either (on the MPT rows up to 4k tokens their width correlates
with the error at Spearman -0.15): so the 10-90% band of a predicted time `p` is, per side,

    high = p x exp(sqrt(max(s x r_high, a_high)^2 + d_high^2)),  low = p x exp(-sqrt(max(s x r_low, a_low)^2 + d_low^2))

- `r`: the residual band's log widths (the replays), scaled by `residual_scale` `s` (1: as the residuals make it);
- `a`: the a-priori log widths of kernels priced from a proxy (`attention_model.PROXY_UNCERTAINTY`, stated by the
  data's README, not fitted): the share of the iteration they take, moved by their stated uncertainty;
- `d`: the model discrepancy, set by split conformal calibration on measured suites (`calibrate`): the smallest
  widths that leave at most 10% of those rows above the band and 10% below it (with the finite-sample correction).

The point prediction never changes; only the band's width does. The widths are calibrated on whole suites and
judged on a suite left out (`benchmarks/band_calibration.py`); shipped as `data/band/discrepancy.json` with
their provenance, which every prediction names (`Discrepancy.meaning`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from maya.core.paths import data_dir

FORMAT = "maya-band-discrepancy/2"
MISS = 0.1
"""Share of rows a calibrated band may leave on each side (a 10-90% band)."""


@dataclass(frozen=True)
class Discrepancy:
    low: float
    """Log width added below the prediction at the 10th percentile."""
    high: float
    """Log width added above the prediction at the 90th percentile."""
    residual_scale: float = 1.0
    """Factor on the residual band's log widths (0: the band is the discrepancy and the a-priori widths alone)."""
    provenance: dict = field(default_factory=dict, compare=False)
    """Calibration suites, rows, date and the coverage checked on suites left out; not used to widen."""

    def __post_init__(self):
        values = (self.low, self.high, self.residual_scale)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(
                f"discrepancy widths and residual scale must be finite and >= 0, got low={self.low}, "
                f"high={self.high}, residual_scale={self.residual_scale}"
            )

    def band(self, center: float, low: float, high: float, apriori: tuple[float, float] = (0.0, 0.0)):
        """The calibrated band around `center` from the residual band [low, high] and the a-priori log widths."""
        return band(center, low, high, *apriori, self.low, self.high, self.residual_scale)

    @property
    def meaning(self) -> str:
        """What the band is, in a sentence a prediction carries."""
        p = self.provenance
        if not p.get("calibrated_on"):
            return "10-90% band: the estimators' held-out residuals only (no calibrated model discrepancy)"
        residuals = (
            "without the estimators' residual band"
            if self.residual_scale == 0
            else f"with the estimators' residual band x {self.residual_scale:g}"
        )
        return (
            f"10-90% band: model discrepancy (-{self.low:.3f} / +{self.high:.3f} in log) calibrated by split conformal "
            f"on {p['calibrated_on']} ({p.get('rows', '?')} rows, {p.get('written', '?')}), {residuals}, with the "
            "a-priori uncertainty of proxy-priced kernels"
        )

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, raw: dict) -> Discrepancy:
        if raw.get("format") != FORMAT:
            raise ValueError(f"model discrepancy of format {raw.get('format')!r}, expected {FORMAT!r}")
        return cls(float(raw["low"]), float(raw["high"]), float(raw["residual_scale"]), raw.get("provenance", {}))


NONE = Discrepancy(0.0, 0.0)
"""The residual band as the replays make it."""


def base_widths(center, low, high, apriori_low, apriori_high, residual_scale: float):
    """Per side, the log width the discrepancy is added to: the larger of the scaled residual band's and the
    a-priori one (scalars or arrays). At scale 0 the residual band takes no part (a row without one is fine)."""
    center, low, high = (np.asarray(x, dtype="float64") for x in (center, low, high))
    if residual_scale == 0:
        below = above = np.zeros(np.broadcast(center, low, high).shape)
    else:
        below = residual_scale * np.log(center / np.minimum(low, center))
        above = residual_scale * np.log(np.maximum(high, center) / center)
    return np.maximum(below, apriori_low), np.maximum(above, apriori_high)


def band(center, low, high, apriori_low, apriori_high, d_low: float, d_high: float, residual_scale: float):
    """The band around `center` (scalars or arrays): base widths (`base_widths`) and the discrepancy in
    quadrature, each side on its own."""
    below, above = base_widths(center, low, high, apriori_low, apriori_high, residual_scale)
    center = np.asarray(center, dtype="float64")
    new_low, new_high = center * np.exp(-np.hypot(below, d_low)), center * np.exp(np.hypot(above, d_high))
    if new_low.ndim == 0:
        return float(new_low), float(new_high)
    return new_low, new_high


def apriori_widths(proxied: dict[float, float]) -> tuple[float, float]:
    """Log widths (below, above) of an iteration of which kernels priced from a proxy of relative uncertainty
    `u` take `share` (`proxied`: u -> share), each such kernel (1 + u) x slower or faster than priced."""
    slower = sum(share * u for u, share in proxied.items())
    faster = sum(share * u / (1 + u) for u, share in proxied.items())
    return 0.0 - float(np.log1p(-faster)), float(np.log1p(slower))


def calibrate(predicted, measured, below, above, *, miss: float = MISS) -> tuple[float, float]:
    """Split conformal widths (d_low, d_high): per row the smallest width that, added in quadrature to its base
    log widths `below`, `above` (`base_widths`), brings its measured time into the band on that side (0 when
    inside), then the ceil((n + 1)(1 - miss))-th smallest of each side, so at most `miss` of exchangeable new
    rows fall outside on each side."""
    predicted, measured, below, above = (np.asarray(x, dtype="float64") for x in (predicted, measured, below, above))
    if not len(predicted) or not (np.isfinite(predicted).all() and np.isfinite(measured).all()):
        raise ValueError("calibration needs at least one row with a finite prediction and measurement")
    if (predicted <= 0).any() or (measured <= 0).any():
        raise ValueError("calibration needs positive predicted and measured times")
    error = np.log(measured / predicted)
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
