"""Training a `KernelEstimator` from measured calls (a call frame plus `measured_ns`).

Per family with measurements:
- the `model` (spec-sheet features included) is validated with whole workloads held out (the `model` column
  of Vidur's rows: every shape one model's layers run, over up to `transfer_folds` folds), since a prediction
  is for a workload whose shapes were never measured; rows without a workload (NeuSight's random shape grids)
  are split at random among the folds, and a segment with fewer than two workloads takes a random held-out
  share of the shapes;
- the same model is validated with whole GPUs held out (`unseen_gpu_band`): the band of a call on a GPU of an
  architecture trained on that was never measured itself (an A100 40GB priced from an A100 80GB's data);
- the `model_transfer` (no hardware identity) is validated with whole architectures held out, over
  up to `transfer_folds` folds (a random split when only one architecture was measured);
- both are then refitted on all rows; the held-out residuals give each its uncertainty band.
Both predict device time relative to the larger of the device floor and the roofline; isolated
measurements (`timing` column) give device time once their hosts' dispatch is taken off, except those on
their launch floor, which only bound it (below by the device floor and roofline, above by the post-launch
host time and the floor's jitter): they train at the geometric middle of those bounds, and the exact
lookup leaves them out (`maya.estimators.launch_floor`).

The trained estimator's GEMM references are its own (`gemm_reference.derive`): the ratio of its learned tensor-core
GEMM price to public cuBLAS rows, on the parts whose GEMMs it learned from Vidur's rows (`source`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold, ShuffleSplit

from maya.core.paths import data_dir

from . import gemm_reference
from .calls import KEY_COLUMNS, normalize
from .efficiency_model import Band, EfficiencyModel, ModelParams
from .evaluation import mape
from .families import PREDICTORS, FamilyPredictor
from .features import features_of, hardware_features
from .hardware_table import catalog_names, hardware_arrays
from .kernel_estimator import FamilyModels, KernelEstimator
from .launch_floor import DEVICE, DEVICE_FLOOR_S, ISOLATED, POST_LAUNCH_S, LaunchFloors, isolated_seconds
from .lookup import MeasuredShapes
from .segments import family_of, model_key, segments

MEASURED = "measured_ns"
TIMING = "timing"
WORKLOAD = "model"
"""The column naming the workload a measured call came from (Vidur's model), for the held-out-workload split."""
SOURCE = "source"
"""The column naming the source a measured call came from (`training_data`: neusight, vidur, a profiled run), which
the version's GEMM references answer to (`gemm_reference.derive`)."""


@dataclass(frozen=True)
class TrainConfig:
    params: ModelParams = field(default_factory=ModelParams)
    validation_fraction: float = 0.1
    transfer_folds: int = 3
    min_rows: int = 20
    """Families with fewer measured rows keep the roofline."""
    families: tuple[str, ...] | None = None
    """Families to learn (None: every family measured); the others keep the roofline."""
    validate: bool = True
    """Hold out data to measure accuracy and uncertainty bands (off: faster, bands of zero width)."""
    seen_model: bool = True
    """Fit the model with spec-sheet features for the trained hardware (off: the transfer model prices
    every call; half the training, for leave-one-GPU-out runs that only use the transfer model)."""

    def digest(self, references: str) -> str:
        """Of this configuration, of the code it runs (`code_digest`) and of the GEMM references' inputs
        (`gemm_reference.inputs_digest` of the measurements)."""
        body = {**asdict(self), "code": code_digest(), "gemm_references": references}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of what turns measurements into a model besides the configuration: the estimators'
    source and the hardware catalog (its spec-sheet figures are features). A changed Maya then trains
    a new version instead of reusing one that other code built from the same data."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    h.update((data_dir() / "hardware" / "catalog.json").read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class TrainingResult:
    estimator: KernelEstimator
    metrics: dict


def measurements_frame(measurements: pd.DataFrame) -> pd.DataFrame:
    """Normalised calls with catalog hardware names, positive `measured_ns`, their `timing` (default `device`) and
    `source` (default `gemm_reference.UNNAMED_SOURCE`)."""
    if MEASURED not in measurements.columns:
        raise ValueError(f"measurements need a {MEASURED} column")
    frame = normalize(measurements)
    frame["hardware"] = catalog_names(frame["hardware"])
    frame[MEASURED] = measurements[MEASURED].astype("float64").to_numpy()
    frame[TIMING] = measurements[TIMING].to_numpy() if TIMING in measurements.columns else DEVICE
    frame[WORKLOAD] = measurements[WORKLOAD].to_numpy() if WORKLOAD in measurements.columns else None
    frame[SOURCE] = (
        measurements[SOURCE].astype(str).to_numpy() if SOURCE in measurements.columns else gemm_reference.UNNAMED_SOURCE
    )
    unknown = sorted(set(frame[TIMING].astype(str)) - {DEVICE, ISOLATED})
    if unknown:
        raise ValueError(
            f"unknown {TIMING} value(s) {', '.join(map(repr, unknown))}; expected {DEVICE!r} or {ISOLATED!r}"
        )
    return frame[frame[MEASURED] > 0].reset_index(drop=True)


def data_hash(measurements: pd.DataFrame) -> str:
    """SHA-256 of the measurements, independent of row order."""
    frame = measurements_frame(measurements)
    rows = np.sort(pd.util.hash_pandas_object(frame[[*KEY_COLUMNS, TIMING, MEASURED]], index=False).to_numpy())
    return hashlib.sha256(rows.tobytes()).hexdigest()


def train(measurements: pd.DataFrame, config: TrainConfig = TrainConfig()) -> TrainingResult:
    """One model pair per family segment (`maya.estimators.segments`: `gemm@tensor`, `gemm@cuda`, ...)."""
    frame = measurements_frame(measurements)
    keys = np.empty(len(frame), dtype=object)
    for family, rows in frame.groupby("family").groups.items():
        at = frame.index.get_indexer(rows)
        part = frame.iloc[at]
        keys[at] = [model_key(family, s) for s in segments(family, part, hardware_arrays(part))]
    models, bands, family_metrics = {}, {}, {}
    for key, rows in frame.groupby(keys).groups.items():
        family = family_of(key)
        learn = config.families is None or family in config.families
        model, bands[key], family_metrics[key] = _train_family(
            family, frame.loc[rows].reset_index(drop=True), config, learn
        )
        if model is not None:
            models[key] = model
    device_ns, known = _device_ns(frame, keys, models)
    lookup = MeasuredShapes.from_measurements(frame[known], device_ns[known])
    estimator = KernelEstimator(models=models, lookup=lookup, roofline_bands=bands)
    estimator = replace(estimator, gemm_references=gemm_reference.derive(estimator, frame))
    return TrainingResult(
        estimator, {"rows": len(frame), "hardware": sorted(frame["hardware"].unique()), "families": family_metrics}
    )


def _train_family(
    family: str, calls: pd.DataFrame, config: TrainConfig, learn: bool
) -> tuple[FamilyModels | None, Band, dict]:
    """The family's models (when `learn`), its roofline band and its metrics."""
    predictor = PREDICTORS[family]
    hw = hardware_arrays(calls)
    priced = np.isfinite(predictor.work(calls, hw).roofline_s(hw))
    if not priced.all():  # rows whose shape does not give the work are not used
        calls = calls[priced].reset_index(drop=True)
    data = _FamilyData(predictor, calls)
    prepared = data.prepared(np.arange(len(calls)))
    log_roofline_ratio = (prepared.log_ratio + np.log(data.baseline_s / data.roofline_s))[prepared.known]
    spread = Band.of_residuals(log_roofline_ratio)
    roofline_band = Band(max(spread.low, 0.0), spread.high)  # the roofline is a lower bound on device time
    metrics = {
        "rows": len(calls),
        "rows_without_shape": int((~priced).sum()),
        "hardware": sorted(set(data.hw.name)),
        "below_roofline": int((log_roofline_ratio < 0).sum()),
        "roofline_mape": mape(data.measured_s, data.roofline_s),
    }
    if not learn or len(calls) < config.min_rows:
        return None, roofline_band, metrics
    features = data.features
    seen_names = features.names
    transfer_names = features.without(list(hardware_features(data.hw)))
    seen_band = transfer_band = Band(0.0, 0.0)
    unseen_gpu_band = None
    if config.validate and config.seen_model:
        folds, metrics["validation_split"] = _workload_folds(calls[WORKLOAD], config)
        seen_band, metrics["validation_mape"] = _validate(data, seen_names, folds, config.params)
        gpu_folds = _gpu_folds(data.hw.name, config)
        if gpu_folds:
            unseen_gpu_band, metrics["unseen_gpu_mape"] = _validate(
                data, seen_names, gpu_folds, config.params, data.hw.name
            )
    if config.validate:
        folds, by_gpu = _transfer_folds(data.hw.architecture, config)
        transfer_band, metrics["transfer_mape"] = _validate(
            data, transfer_names, folds, config.params.for_transfer(), data.hw.name if by_gpu else None
        )
    target = np.maximum(prepared.log_ratio, 0.0)  # no call beats the device floor or its roofline
    transfer = EfficiencyModel.fit(features, transfer_names, target, config.params.for_transfer(), band=transfer_band)
    models = FamilyModels(
        seen=EfficiencyModel.fit(features, seen_names, target, config.params, band=seen_band)
        if config.seen_model
        else transfer,
        transfer=transfer,
        hardware=frozenset(data.hw.name),
        architectures=frozenset(data.hw.architecture.astype(int).tolist()),
        floors=prepared.floors,
        kernels=frozenset(predictor.kernel_names(calls["op"]).tolist()),
        resolves_from_s=data.resolves_from_s(),
        unseen_gpu_band=unseen_gpu_band,
    )
    return models, roofline_band, metrics


class _FamilyData:
    """One family's measured calls with their hardware figures, roofline, timing and features."""

    def __init__(self, predictor: FamilyPredictor, calls: pd.DataFrame):
        self.hw = hardware_arrays(calls)
        work = predictor.work(calls, self.hw)
        self.roofline_s = work.roofline_s(self.hw)
        self.measured_s = calls[MEASURED].to_numpy() * 1e-9
        self.ops = calls["op"].to_numpy()
        self.isolated = (calls[TIMING] == ISOLATED).to_numpy()
        self.baseline_s = np.maximum(self.roofline_s, DEVICE_FLOOR_S)
        self.features = features_of(predictor, calls, self.hw, work, with_hardware=True)

    def resolves_from_s(self) -> float:
        """The shortest device time these measurements resolve (`FamilyModels.resolves_from_s`)."""
        device = self.measured_s[~self.isolated]
        return float(min(device.min() if len(device) else np.inf, POST_LAUNCH_S if self.isolated.any() else np.inf))

    def prepared(self, fit_rows: np.ndarray) -> _Prepared:
        """Launch floors measured on the isolated `fit_rows`, then every row's device time and dispatch."""
        isolated = fit_rows[self.isolated[fit_rows]]
        floors = LaunchFloors.measure(
            self.hw.name[isolated], self.ops[isolated], self.measured_s[isolated], self.roofline_s[isolated]
        )
        dispatch_s, left_s, bound_s = floors.device_time(self.hw.name, self.ops, self.measured_s, self.isolated)
        known = np.isnan(bound_s)
        bounded = np.sqrt(self.baseline_s * np.maximum(self.baseline_s, np.nan_to_num(bound_s)))
        device_s = np.where(known, np.maximum(left_s, DEVICE_FLOOR_S), bounded)
        return _Prepared(floors, np.log(device_s / self.baseline_s), dispatch_s, known)

    def measured_estimate(self, prepared: _Prepared, log_slowdown: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The predicted measurement of `rows` (seconds): device time, or what an isolated call reads."""
        device_s = self.baseline_s[rows] * np.exp(log_slowdown)
        return np.where(self.isolated[rows], isolated_seconds(prepared.dispatch_s[rows], device_s), device_s)


@dataclass(frozen=True)
class _Prepared:
    floors: LaunchFloors
    log_ratio: np.ndarray
    """log(device time / max(device floor, roofline)); of isolated rows not `known`, the middle of its bounds."""
    dispatch_s: np.ndarray
    """The host dispatch each measurement includes (0 for device timings)."""
    known: np.ndarray
    """Whether the measurement gives the device time (not an isolated call on its launch floor)."""


def _device_ns(frame: pd.DataFrame, keys: np.ndarray, models: dict[str, FamilyModels]) -> tuple[np.ndarray, np.ndarray]:
    """Measured device time of every row, and whether the measurement gives it: isolated measurements less
    their hosts' dispatch by the floors of their segment's model (unknown on the floor, and for segments
    without a model)."""
    device = frame[MEASURED].to_numpy(dtype="float64").copy()
    isolated = (frame[TIMING] == ISOLATED).to_numpy()
    known = ~isolated
    for key, model in models.items():
        rows = isolated & (keys == key)
        _, left_s, bound_s = model.floors.device_time(
            frame["hardware"][rows], frame["op"][rows], device[rows] * 1e-9, np.ones(rows.sum(), dtype=bool)
        )
        device[rows], known[rows] = left_s * 1e9, np.isnan(bound_s)
    return device, known


def _random_split(size: int, config: TrainConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    split = ShuffleSplit(n_splits=1, test_size=config.validation_fraction, random_state=config.params.seed)
    return list(split.split(np.zeros(size)))


def _workload_folds(workload: pd.Series, config: TrainConfig) -> tuple[list, str]:
    """Folds that hold out whole workloads (rows without one go to random folds), and the split's name; a random
    split of the shapes when fewer than two workloads were measured."""
    labels = workload.astype("object").where(workload.notna(), None).to_numpy()
    known = np.array([x is not None for x in labels], dtype=bool)
    names = pd.unique(labels[known])
    if len(names) < 2:
        return _random_split(len(labels), config), "random shapes"
    folds = min(config.transfer_folds, len(names))
    groups = np.empty(len(labels), dtype=np.int64)
    groups[known] = pd.factorize(labels[known])[0]
    rng = np.random.default_rng(config.params.seed)
    groups[~known] = len(names) + rng.integers(0, folds, int((~known).sum()))
    return list(GroupKFold(n_splits=folds).split(groups, groups=groups)), "workloads held out"


def _gpu_folds(hardware: np.ndarray, config: TrainConfig) -> list:
    """Folds that hold out whole GPUs (none with a single one)."""
    groups = pd.factorize(hardware)[0]
    if groups.max() < 1:
        return []
    return list(GroupKFold(n_splits=min(config.transfer_folds, groups.max() + 1)).split(groups, groups=groups))


def _transfer_folds(architecture: np.ndarray, config: TrainConfig) -> tuple[list, bool]:
    """Folds that hold out whole architectures (and whether they do: not with a single one)."""
    groups = pd.factorize(architecture)[0]
    if groups.max() == 0:
        return _random_split(len(groups), config), False
    folds = GroupKFold(n_splits=min(config.transfer_folds, groups.max() + 1)).split(groups, groups=groups)
    return list(folds), True


def _validate(
    data: _FamilyData,
    names: tuple[str, ...],
    folds: list[tuple[np.ndarray, np.ndarray]],
    params: ModelParams,
    hardware: np.ndarray | None = None,
) -> tuple[Band, float | dict[str, float]]:
    """Held-out band of log(device time / predicted) and MAPE of the latency as measured (isolated rows: with
    their dispatch), per held-out GPU when `hardware` is given. Launch floors come from the fit rows too: a
    held-out GPU gets those of the others."""
    residuals, errors = [], {}
    for fit_rows, held_rows in folds:
        prepared = data.prepared(fit_rows)
        model = EfficiencyModel.fit(data.features, names, np.maximum(prepared.log_ratio, 0.0), params, rows=fit_rows)
        predicted = model.log_slowdown(data.features, held_rows)
        known = prepared.known[held_rows]
        residuals.append(prepared.log_ratio[held_rows][known] - predicted[known])
        measured = data.measured_s[held_rows]
        estimate = data.measured_estimate(prepared, predicted, held_rows)
        if hardware is None:
            errors["all"] = mape(measured, estimate)
        else:
            for name in np.unique(hardware[held_rows]):
                here = hardware[held_rows] == name
                errors[str(name)] = mape(measured[here], estimate[here])
    return Band.of_residuals(np.concatenate(residuals)), errors["all"] if hardware is None else errors
