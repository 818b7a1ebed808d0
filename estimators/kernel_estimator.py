"""Kernel runtime prediction over a whole call frame at once, with a fallback chain per call:

1. `lookup` — the shape was measured on this hardware in training: its measured median;
2. `model` — the family's learned model trained on this hardware, or on a GPU of the same
   architecture (compute capability: the same kernels, so spec-sheet features place it); learned models
   scale the larger of the call's launch floor and roofline (`maya.estimators.launch_floor`);
3. `model_transfer` — hardware of an architecture never trained on: the family's model trained
   without spec-sheet identity features, which carries across GPUs;
4. `roofline` — no model for the family: the analytical roofline `max(FLOPs / peak, bytes / bandwidth)`.

Every prediction carries its method and a band (`duration_low_ns`, `duration_high_ns`: the 10th and
90th percentiles of measured / predicted seen on held-out training data for that family and method).
The roofline is a true lower bound, so its band starts at the roofline; its upper end is the spread
of measured / roofline in training (NaN when the family was never measured).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from .calls import normalize
from .efficiency_model import Band, EfficiencyModel
from .families import PREDICTORS
from .features import features_of
from .hardware_table import catalog_names, hardware_arrays
from .launch_floor import LaunchFloors
from .lookup import MeasuredShapes, shape_keys

METHODS: tuple[str, ...] = ("lookup", "model", "model_transfer", "roofline")


@dataclass(frozen=True)
class FamilyModels:
    """The two learned models of one family, what they were trained on: hardware (catalog names) and
    architectures (compute capability, major * 10 + minor), and the launch floors measured there."""

    seen: EfficiencyModel
    transfer: EfficiencyModel
    hardware: frozenset[str]
    architectures: frozenset[int]
    floors: LaunchFloors = field(default_factory=LaunchFloors)


@dataclass(frozen=True)
class KernelEstimator:
    models: dict[str, FamilyModels] = field(default_factory=dict)
    lookup: MeasuredShapes | None = None
    roofline_bands: dict[str, Band] = field(default_factory=dict)
    """Per family, the spread of log(measured / roofline) in training."""

    def predict(self, calls: pd.DataFrame | pa.Table) -> pd.DataFrame:
        """The normalised call frame with `roofline_ns`, `efficiency`, `duration_ns`, `duration_low_ns`,
        `duration_high_ns` (nanoseconds) and `method` added.
        Repeated shapes (the same call in every layer and iteration) are priced once."""
        frame = normalize(calls)
        frame["hardware"] = catalog_names(frame["hardware"])
        keys = shape_keys(frame)
        distinct_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        if len(distinct_keys) == len(frame):
            return frame.assign(**self._price(frame, keys))
        priced = self._price(frame.iloc[first], distinct_keys)
        return frame.assign(**{name: values[inverse] for name, values in priced.items()})

    def _price(self, frame: pd.DataFrame, keys: np.ndarray) -> dict[str, np.ndarray]:
        """Prediction columns for calls of distinct shapes."""
        hw = hardware_arrays(frame)
        size = len(frame)
        roofline, base, slowdown = np.empty(size), np.empty(size), np.zeros(size)
        low, high = np.zeros(size), np.full(size, np.nan)
        method = np.full(size, "roofline", dtype=object)
        codes, families = pd.factorize(frame["family"])
        for i, family in enumerate(families):
            rows = np.flatnonzero(codes == i)
            predictor, calls_here, hw_here = PREDICTORS[family], frame.iloc[rows], hw.take(rows)
            work = predictor.work(calls_here, hw_here)
            roofline[rows] = base[rows] = work.roofline_s(hw_here) * 1e9
            band = self.roofline_bands.get(family)
            if band is not None:
                high[rows] = max(band.high, 0.0)
            models = self.models.get(family)
            if models is None:
                continue
            floor_s = models.floors.seconds(hw_here.name, calls_here["op"].to_numpy())
            base[rows] = np.maximum(base[rows], floor_s * 1e9)
            features = features_of(predictor, calls_here, hw_here, work, floor_s, with_hardware=True)
            seen = np.isin(hw_here.architecture, list(models.architectures))
            for model, mask, tag in ((models.seen, seen, "model"), (models.transfer, ~seen, "model_transfer")):
                chosen = rows[mask]
                predicted = model.log_slowdown(features, np.flatnonzero(mask))
                slowdown[chosen] = predicted
                low[chosen] = np.maximum(predicted + model.band.low, 0.0)
                high[chosen] = predicted + model.band.high
                method[chosen] = tag
        duration = base * np.exp(slowdown)
        priced = {"roofline_ns": roofline, "efficiency": roofline / duration, "duration_ns": duration,
                  "duration_low_ns": base * np.exp(low), "duration_high_ns": base * np.exp(high),
                  "method": method}
        if self.lookup is not None:
            self._use_measurements(priced, keys)
        return priced

    def _use_measurements(self, priced: dict[str, np.ndarray], keys: np.ndarray) -> None:
        """Replace predictions by measurements where the exact shape was measured."""
        median, p10, p90 = self.lookup.find(keys)
        hit = ~np.isnan(median)
        priced["duration_ns"][hit], priced["duration_low_ns"][hit] = median[hit], p10[hit]
        priced["duration_high_ns"][hit] = p90[hit]
        priced["efficiency"][hit] = np.minimum(priced["roofline_ns"][hit] / median[hit], 1.0)
        priced["method"][hit] = "lookup"
