"""The learned part of a family predictor: gradient-boosted trees (XGBoost) predicting how far a call
runs from its roofline.

The target is the log slowdown `log(device time / baseline) >= 0`, the baseline being the larger of the
device floor and the call's roofline (`launch_floor`); the predicted device time is `baseline * exp(slowdown)`.
Normalising by the baseline is what lets one model serve GPUs of very different speeds.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import asdict, dataclass, replace
from types import ModuleType

import numpy as np

from .features import Features


def _import_xgboost() -> ModuleType:
    """XGBoost, without importing scikit-learn for it. `xgboost.compat` imports scikit-learn (and with it
    SciPy's stats: ~1.5 CPU-s, half of a `maya predict`) only to base `XGBRegressor` and its siblings on
    scikit-learn's classes; Maya uses `xgb.train` and `Booster` alone. Unless scikit-learn is already
    imported, it is hidden while XGBoost imports, so in this process XGBoost's scikit-learn interface lacks
    scikit-learn's base classes (importing scikit-learn itself later works as usual)."""
    if "xgboost" in sys.modules or "sklearn" in sys.modules:
        import xgboost

        return xgboost
    sys.modules["sklearn"] = None  # type: ignore[assignment]  # `import sklearn` raises ImportError
    try:
        import xgboost
    finally:
        if sys.modules.get("sklearn", ...) is None:
            del sys.modules["sklearn"]
    return xgboost


xgb = _import_xgboost()


class ModelFormatError(ValueError):
    """A saved model that the installed XGBoost cannot read (found when the model first predicts)."""


@dataclass(frozen=True)
class ModelParams:
    """Tree ensemble settings (chosen on a validation split of the training data)."""

    n_estimators: int = 200
    max_depth: int = 8
    learning_rate: float = 0.15
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    min_child_weight: float = 1.0
    transfer_max_depth: int = 6
    transfer_min_child_weight: float = 20.0
    """The transfer model (GPUs of unseen architectures) is shallower and more regularised: chosen on
    leave-one-GPU-out validation, where the deeper model learns GPU quirks that do not carry over."""
    nthread: int = 2
    seed: int = 0

    def for_transfer(self) -> ModelParams:
        return replace(
            self,
            max_depth=min(self.max_depth, self.transfer_max_depth),
            min_child_weight=max(self.min_child_weight, self.transfer_min_child_weight),
        )

    def booster_params(self) -> dict:
        params = asdict(self)
        for name in ("n_estimators", "transfer_max_depth", "transfer_min_child_weight"):
            del params[name]
        return {**params, "eta": params.pop("learning_rate"), "objective": "reg:squarederror", "tree_method": "hist"}


@dataclass(frozen=True)
class Band:
    """Quantiles (10th, 90th) of log(measured / predicted) on data the model did not see."""

    low: float
    high: float

    @classmethod
    def of_residuals(cls, log_ratio: np.ndarray) -> Band:
        low, high = np.quantile(log_ratio, [0.1, 0.9]) if len(log_ratio) else (0.0, 0.0)
        return cls(float(low), float(high))


@dataclass(frozen=True)
class EfficiencyModel:
    """A trained booster, or an artifact's saved one (`from_bytes`), parsed on first use: a prediction reads only
    the models of the families, segments and GPU kinds (seen or transfer) it prices."""

    model: xgb.Booster | bytes
    feature_names: tuple[str, ...]
    band: Band

    @functools.cached_property
    def booster(self) -> xgb.Booster:
        """The booster; a loaded one predicts on one thread (the rows of distinct shapes a prediction prices are
        too few to gain from more, and OpenMP's waiting threads spin: ~20 CPU-ms per call on a loaded machine)."""
        if not isinstance(self.model, bytes):
            return self.model
        booster = xgb.Booster()
        try:
            booster.load_model(bytearray(self.model))
        except xgb.core.XGBoostError as e:
            raise ModelFormatError(f"an estimator artifact's model cannot be read by this XGBoost: {e}") from None
        booster.set_param({"nthread": 1})
        return booster

    @classmethod
    def fit(
        cls,
        features: Features,
        names: tuple[str, ...],
        log_slowdown: np.ndarray,
        params: ModelParams,
        rows: np.ndarray | None = None,
        band: Band = Band(0.0, 0.0),
    ) -> EfficiencyModel:
        """Fit on the feature columns `names` of the chosen rows (all by default)."""
        target = log_slowdown if rows is None else log_slowdown[rows]
        data = xgb.DMatrix(
            features.select(names, rows), label=target, feature_names=list(names), nthread=params.nthread
        )
        booster = xgb.train(params.booster_params(), data, num_boost_round=params.n_estimators)
        return cls(booster, names, band)

    def log_slowdown(self, features: Features, rows: np.ndarray | None = None) -> np.ndarray:
        """Predicted log(time / baseline) of the chosen rows, at least 0 (no call beats its baseline)."""
        matrix = features.select(self.feature_names, rows)
        if not len(matrix):
            return np.zeros(0)
        return np.maximum(self.booster.inplace_predict(matrix), 0.0)

    def with_band(self, band: Band) -> EfficiencyModel:
        return EfficiencyModel(self.model, self.feature_names, band)

    def to_bytes(self) -> bytes:
        return self.model if isinstance(self.model, bytes) else bytes(self.model.save_raw("ubj"))

    @classmethod
    def from_bytes(cls, raw: bytes, feature_names: tuple[str, ...], band: Band) -> EfficiencyModel:
        """A model of saved bytes (`to_bytes`), parsed when it first predicts (`booster`)."""
        return cls(bytes(raw), feature_names, band)
