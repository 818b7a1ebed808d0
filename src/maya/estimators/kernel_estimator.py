"""Kernel runtime prediction over a whole call frame at once, with a fallback chain per call:

1. `lookup` — the shape was measured on this hardware in training: its measured median;
2. `model` — the family's learned model trained on this hardware, or on a GPU of the same
   architecture (compute capability: the same kernels, so spec-sheet features place it); learned models
   scale the larger of the device floor and the roofline (`maya.estimators.launch_floor`);
3. `model_transfer` — hardware of an architecture never trained on: the family's model trained
   without spec-sheet identity features, which carries across GPUs; also a call whose kernel its segment
   never measured, priced from a segment that did relative to a kernel both measured
   (`KernelEstimator._price_unmeasured_kernels`);
4. `roofline` — no model for the family: the analytical roofline `max(FLOPs / peak, bytes / bandwidth)`;
5. `composed` — instead of the roofline, for a family without a model that composes its time from
   mechanisms (`FamilyPredictor.compose`: fused attention from the GEMM family's predictions of its
   products, the special-function and FP32 rates of the spec sheet, corrected by the model learned on public
   attention measurements where it covers the kernel; `families/attention.py`, `attention_model.py`).

A tensor-core GEMM (bf16, fp16, TF32) of at least `gemm_reference.MIN_FLOPS` (smaller ones are launch-bound) priced
from measurements on a part with one of the estimator's references (`gemm_references`, derived when it was trained)
has the compute-bound share of its time anchored to public cuBLAS measurements (`gemm_reference`: a price learned
from Vidur's rows carries Vidur's harness, slower than public cuBLAS on the same part; none keeps the learned price).

An Inductor-generated normalization or softmax (`INDUCTOR_ROW_FAMILIES`) that moves more bytes than its family counts
for its own rows is that family's kernel plus the pointwise work fused around it: the rest of its bytes take what
they add to the add moving the row kernel's own bytes (`KernelEstimator._price_fused_rest`): the time of the eager
kernels it replaces, without the launch and tail of a kernel of their own.

`duration_ns` is device time: how long the call keeps its stream busy. `isolated_ns` is what the call
would read timed on its own around one eager call on the measured hosts (their dispatch, then the kernel or
the host's post-launch time, the longer; `maya.estimators.launch_floor`), to compare with measurements
taken that way; for families without a model it is the device time.

`below_measured` marks learned predictions shorter than the measurements their model learned from resolve
(`FamilyModels.resolves_from_s`): their device time is bounded, not fitted.

Every prediction carries its method and a band (`duration_low_ns`, `duration_high_ns`: the 10th and
90th percentiles of measured / predicted seen on held-out training data for that family and method, held out
as the call's situation is new: `model` on a measured GPU, workloads held out; `model` on a GPU of a trained
architecture never measured itself, GPUs held out; `model_transfer`, architectures held out; see `training`).
The roofline is a true lower bound, so its band starts at the roofline; its upper end is the spread
of measured / roofline in training (NaN when the family was never measured).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from .calls import INDUCTOR_OPS, INDUCTOR_ROW_FAMILIES, coded, element_bytes, normalize
from .efficiency_model import Band, EfficiencyModel
from .families import PREDICTORS, Work
from .features import features_of
from .gemm_reference import PRICED_METHODS, GemmReferences, Reference, time_factor
from .hardware_table import catalog_names, hardware_arrays
from .launch_floor import DEVICE_FLOOR_S, POST_LAUNCH_S, LaunchFloors, isolated_seconds
from .lookup import MeasuredShapes, shape_keys
from .segments import SEGMENT_DTYPES, WIDTH_FAMILIES, family_of, model_key, segment_codes

METHODS: tuple[str, ...] = ("lookup", "model", "model_transfer", "roofline", "composed")
PRICED: tuple[str, ...] = ("roofline_ns", "efficiency", "duration_ns", "duration_low_ns", "duration_high_ns")
"""The prediction columns besides `method`, in output order."""
REFERENCE_FAMILY, REFERENCE_KERNEL = "elementwise", "add"
"""The kernel every width segment measures (torch's vectorized add: Vidur's residual adds, NeuSight's adds), to which
kernels a segment never measured are related."""
CHUNK_ROWS = 1 << 16
"""Calls of one family priced at a time: their intermediate arrays stay in cache."""
PRICED_KEPT = 64
"""Sets of distinct shapes whose prices `KernelEstimator` keeps (arrays over the distinct shapes only): every
program of a job, with the GEMMs its composed attention prices, priced again by the band without pricing anything
twice."""


@dataclass(frozen=True)
class FamilyModels:
    """The two learned models of one family, what they were trained on: hardware (catalog names) and
    architectures (compute capability, major * 10 + minor), and the launch floors measured there."""

    seen: EfficiencyModel
    transfer: EfficiencyModel
    hardware: frozenset[str]
    architectures: frozenset[int]
    floors: LaunchFloors = field(default_factory=LaunchFloors)
    kernels: frozenset[str] = frozenset()
    """The kernels measured (`FamilyPredictor.kernel_names` of the ops trained on; empty in older artifacts)."""
    resolves_from_s: float = POST_LAUNCH_S
    """The shortest device time the training measurements resolve: their shortest device-timed measurement
    (Vidur's kernels, Maya's profiles), else the post-launch host time of calls timed one by one (NeuSight's),
    below which those only bound it (`launch_floor`)."""
    unseen_gpu_band: Band | None = None
    """The seen model's residuals with whole GPUs held out: the band of its calls on hardware of an architecture
    trained on that was not measured itself (None: a single GPU was measured, or an older artifact; the seen
    model's own band then applies)."""

    def seen_band(self, hardware: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per call on `hardware` (catalog names) priced by the seen model, the (10th, 90th) percentiles of its
        log residual: held-out workloads on a GPU measured, held-out GPUs on one that was not."""
        measured = np.isin(np.asarray(hardware, dtype=object), list(self.hardware))
        unseen = self.unseen_gpu_band or self.seen.band
        return (
            np.where(measured, self.seen.band.low, unseen.low),
            np.where(measured, self.seen.band.high, unseen.high),
        )


@dataclass(frozen=True)
class KernelEstimator:
    models: dict[str, FamilyModels] = field(default_factory=dict)
    """Per family segment (`segments.model_key`: `gemm@tensor`, `copy`, ...)."""
    lookup: MeasuredShapes | None = None
    roofline_bands: dict[str, Band] = field(default_factory=dict)
    """Per family segment (`segments.model_key`), the spread of log(measured / roofline) in training."""
    gemm_references: GemmReferences = field(default_factory=GemmReferences)
    """The ratios anchoring this estimator's tensor-core GEMM price to public cuBLAS measurements on the parts they
    were taken on, with what they answer for (`gemm_reference`: derived when it was trained); none: the learned
    price alone."""
    last: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The prediction columns of the last `PRICED_KEPT` sets of distinct shapes priced, by their digest, oldest
    first (`_price_once`)."""
    artifact_sha256: str | None = field(default=None, repr=False, compare=False)
    """The SHA-256 of the registered artifact it was read from (`Registry.load`); None when built in this process.
    It names the stored attention fit (`attention_model.stored_fit`), so a `replace()` that changes how the copy
    prices must clear it (`artifact_sha256=None`), as `gemm_reference.uncalibrated` does."""

    def predict(self, calls: pd.DataFrame | pa.Table) -> pd.DataFrame:
        """The normalised call frame with `roofline_ns`, `efficiency`, `duration_ns`, `duration_low_ns`,
        `duration_high_ns`, `isolated_ns` (nanoseconds), `method` and `below_measured` added.
        Repeated shapes (the same call in every layer and iteration) are priced once, and so are the same
        calls priced again in a row (the simulator's pricing, then the band's quantiles: `_price_once`)."""
        frame = normalize(calls)
        frame["hardware"] = catalog_names(frame["hardware"])
        table = coded(frame)
        keys = shape_keys(table)  # categoricals hash as their values do
        codes, distinct_keys = pd.factorize(keys)
        if len(distinct_keys) == len(frame):
            priced = self._price_once(table, keys)
        else:
            # codes number keys by first appearance: a key's first row is where their running maximum rises
            first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1))
            priced = {
                name: values[codes] for name, values in self._price_once(table.iloc[first], distinct_keys).items()
            }
        method = pa.array(METHODS, type=pa.large_string()).take(priced.pop("method"))
        below = priced.pop("below_measured")
        return frame.assign(**priced, method=pd.Series(method, index=frame.index, dtype="str"), below_measured=below)

    def _price_once(self, calls: pd.DataFrame, keys: np.ndarray) -> dict[str, np.ndarray]:
        """`_price`, or a copy of its columns when the same calls were among the last priced (`last`: a program's
        kernels are priced again by the band after every other program and the GEMMs composed attention prices
        in between)."""
        digest = hashlib.sha256(repr(list(calls.columns)).encode())
        digest.update(pd.util.hash_pandas_object(calls, index=True).to_numpy().tobytes())
        key = digest.hexdigest()
        priced = self.last.pop(key, None)
        if priced is None:
            priced = self._price(calls, keys)
            while len(self.last) >= PRICED_KEPT:
                del self.last[next(iter(self.last))]
        self.last[key] = priced
        return {name: values.copy() for name, values in priced.items()}

    def _price(self, calls: pd.DataFrame, keys: np.ndarray) -> dict[str, np.ndarray]:
        """Prediction columns for calls of distinct shapes (text columns as categoricals, `coded`);
        `method` as indices into `METHODS`."""
        fused, own, rest = fused_rest(calls)
        if len(fused):  # the row kernel of each priced on its own work, the rest below
            moved = calls["bytes"].to_numpy(dtype="float64", copy=True)
            moved[fused] = np.nan
            calls = calls.assign(bytes=moved)
        priced = {name: np.empty(len(calls)) for name in PRICED}
        priced["method"] = np.empty(len(calls), dtype="int8")
        priced["dispatch_ns"] = np.empty(len(calls))
        priced["resolves_from_ns"] = np.empty(len(calls))
        codes, families = pd.factorize(calls["family"])
        for i, family in enumerate(families):
            family_rows = np.flatnonzero(codes == i)
            for start in range(0, len(family_rows), CHUNK_ROWS):
                rows = family_rows[start : start + CHUNK_ROWS]
                for name, values in self._price_family(family, calls.iloc[rows]).items():
                    priced[name][rows] = values
        if self.lookup is not None:
            self._use_measurements(priced, keys)
        if self.gemm_references.references:
            _calibrate_gemms(priced, calls, self.gemm_references.references)
        if len(fused):
            self._price_fused_rest(priced, calls.iloc[fused], fused, own, rest)
        dispatch = priced.pop("dispatch_ns")
        learned = (priced["method"] == METHODS.index("model")) | (priced["method"] == METHODS.index("model_transfer"))
        priced["below_measured"] = learned & (priced["duration_ns"] < priced.pop("resolves_from_ns"))
        priced["isolated_ns"] = np.where(
            np.isnan(dispatch),
            priced["duration_ns"],
            isolated_seconds(dispatch * 1e-9, priced["duration_ns"] * 1e-9) * 1e9,
        )
        return priced

    def _price_fused_rest(
        self, priced: dict[str, np.ndarray], calls: pd.DataFrame, rows: np.ndarray, own: np.ndarray, rest: np.ndarray
    ) -> None:
        """Add to the prediction columns of `rows` (`calls` their own-work calls) the time `rest` more bytes add to
        the reference add moving their own (`Work.bytes`): the pointwise work a generated row kernel fused, at the
        add's marginal rate, in the same launch (in place)."""
        both = self.predict(pd.concat([_reference_calls(calls, own + rest), _reference_calls(calls, own)]))
        for name in ("roofline_ns", "duration_ns", "duration_low_ns", "duration_high_ns"):
            values = both[name].to_numpy(dtype="float64")
            priced[name][rows] += np.maximum(values[: len(rows)] - values[len(rows) :], 0.0)
        priced["efficiency"][rows] = priced["roofline_ns"][rows] / priced["duration_ns"][rows]

    def _price_family(self, family: str, calls: pd.DataFrame) -> dict[str, np.ndarray]:
        """Prediction columns for calls of one family, each by its segment's model (`segments`), else by another
        segment's of the family, else by the roofline."""
        predictor, hw = PREDICTORS[family], hardware_arrays(calls)
        work = predictor.work(calls, hw)
        roofline = work.roofline_s(hw) * 1e9
        base = np.maximum(roofline, DEVICE_FLOOR_S * 1e9)  # no kernel takes less, priced by a model or not
        slowdown, low = np.zeros(len(calls)), np.zeros(len(calls))
        high = np.full(len(calls), np.nan)
        method = np.full(len(calls), METHODS.index("roofline"), dtype="int8")
        dispatch, resolves_from = np.full(len(calls), np.nan), np.full(len(calls), np.nan)
        if not any(family_of(k) == family for k in self.models):
            composed = predictor.compose(calls, hw, self.predict)
            if composed is not None:
                duration = np.maximum(composed.seconds, DEVICE_FLOOR_S) * 1e9
                return {
                    "roofline_ns": roofline,
                    "efficiency": roofline / duration,
                    "duration_ns": duration,
                    "duration_low_ns": np.minimum(np.maximum(composed.low_s * 1e9, roofline), duration),
                    "duration_high_ns": np.maximum(composed.high_s * 1e9, duration),
                    "method": np.full(len(calls), METHODS.index("composed"), dtype="int8"),
                    "dispatch_ns": dispatch,
                    "resolves_from_ns": resolves_from,
                }
        codes, names = segment_codes(family, calls, hw)
        features = None
        for code in np.flatnonzero(np.bincount(codes, minlength=len(names))):
            here, name = codes == code, names[code]
            key = self._model_key(family, name)
            band = self.roofline_bands.get(key) or next(
                (b for k, b in sorted(self.roofline_bands.items()) if family_of(k) == family), None
            )
            high[here] = np.nan if band is None else max(band.high, 0.0)
            models = self.models.get(key)
            if models is None:
                continue
            if features is None:
                features = features_of(predictor, calls, hw, work, with_hardware=True)
            rows = np.flatnonzero(here)
            dispatch[rows] = models.floors.dispatch_seconds(calls["hardware"].iloc[rows], calls["op"].iloc[rows]) * 1e9
            resolves_from[rows] = models.resolves_from_s * 1e9
            seen = np.isin(hw.architecture[rows], list(models.architectures))
            for model, mask, tag in ((models.seen, seen, "model"), (models.transfer, ~seen, "model_transfer")):
                chosen = rows[mask]
                predicted = model.log_slowdown(features, chosen)
                band_low, band_high = (
                    models.seen_band(hw.name[chosen]) if tag == "model" else (model.band.low, model.band.high)
                )
                slowdown[chosen] = predicted
                low[chosen] = np.maximum(predicted + band_low, 0.0)
                high[chosen] = predicted + band_high
                method[chosen] = METHODS.index(tag)
        if features is not None and family in WIDTH_FAMILIES and len(names) > 1:
            transferred, log_slowdown = self._price_unmeasured_kernels(family, calls, work, base, codes, names)
            shift = log_slowdown - slowdown[transferred]
            slowdown[transferred] = log_slowdown
            low[transferred] = np.maximum(low[transferred] + shift, 0.0)
            high[transferred] += shift
            method[transferred] = METHODS.index("model_transfer")
        duration = base * np.exp(slowdown)
        return {
            "roofline_ns": roofline,
            "efficiency": roofline / duration,
            "duration_ns": duration,
            "duration_low_ns": base * np.exp(low),
            "duration_high_ns": base * np.exp(high),
            "method": method,
            "dispatch_ns": dispatch,
            "resolves_from_ns": resolves_from,
        }

    def _price_unmeasured_kernels(
        self, family: str, calls: pd.DataFrame, work: Work, base: np.ndarray, codes: np.ndarray, names: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows whose kernel their segment's model never measured but another segment's did (torch's layer norm
        and GELU kernels: fp32 from NeuSight, 16-bit only from one Vidur model), with their log slowdown priced as
        t_other(kernel) / t_other(add) x t_own(add). The other segment prices the call at its own element type
        (`SEGMENT_DTYPES`), the add (`REFERENCE_KERNEL`: two tensors read and one written) moves the same bytes as
        the call in each: what the kernel costs relative to the add is a property of the kernel, which the other
        segment measured; how fast the add runs at the call's element width on its GPU is what the call's own
        segment measured. Only where the other segment's measurements resolve both of its times
        (`FamilyModels.resolves_from_s`)."""
        kernels = None
        out_rows, out_values = [], []
        for code, name in enumerate(names):
            own, own_reference = (self.models.get(model_key(f, name)) for f in (family, REFERENCE_FAMILY))
            if own is None or not own.kernels or own_reference is None or REFERENCE_KERNEL not in own_reference.kernels:
                continue
            kernels = PREDICTORS[family].kernel_names(calls["op"]) if kernels is None else kernels
            rows = np.flatnonzero((codes == code) & ~np.isin(kernels, list(own.kernels)))
            for other_name in names:
                other, other_reference = (self.models.get(model_key(f, other_name)) for f in (family, REFERENCE_FAMILY))
                if (
                    other_name == name
                    or other is None
                    or other_reference is None
                    or not len(rows)
                    or REFERENCE_KERNEL not in other_reference.kernels
                ):
                    continue
                chosen = rows[np.isin(kernels[rows], list(other.kernels))]
                if not len(chosen):
                    continue
                there = calls.iloc[chosen].assign(dtype=SEGMENT_DTYPES[other_name])
                other_ns, other_bytes = _learned_ns(other, family, there)
                other_reference_ns, _ = _learned_ns(
                    other_reference, REFERENCE_FAMILY, _reference_calls(there, other_bytes)
                )
                own_reference_ns, _ = _learned_ns(
                    own_reference, REFERENCE_FAMILY, _reference_calls(calls.iloc[chosen], work.bytes[chosen])
                )
                resolved = (other_ns >= other.resolves_from_s * 1e9) & (
                    other_reference_ns >= other_reference.resolves_from_s * 1e9
                )
                at = chosen[resolved]
                priced_ns = (other_ns / other_reference_ns * own_reference_ns)[resolved]
                out_rows.append(at)
                out_values.append(np.log(np.maximum(priced_ns, base[at]) / base[at]))  # no call beats its baseline
                rows = np.setdiff1d(rows, chosen)
        if not out_rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate(out_rows), np.concatenate(out_values)

    def _model_key(self, family: str, segment: str) -> str:
        """The segment's model, else the family's first segment with a model, else the segment's own key."""
        key = model_key(family, segment)
        if key in self.models:
            return key
        return next((k for k in sorted(self.models) if family_of(k) == family), key)

    def _use_measurements(self, priced: dict[str, np.ndarray], keys: np.ndarray) -> None:
        """Replace predictions by measurements where the exact shape was measured."""
        median, p10, p90 = self.lookup.find(keys)
        hit = ~np.isnan(median)
        priced["duration_ns"][hit], priced["duration_low_ns"][hit] = median[hit], p10[hit]
        priced["duration_high_ns"][hit] = p90[hit]
        priced["efficiency"][hit] = np.minimum(priced["roofline_ns"][hit] / median[hit], 1.0)
        priced["method"][hit] = METHODS.index("lookup")


def _calibrate_gemms(priced: dict[str, np.ndarray], calls: pd.DataFrame, references: tuple[Reference, ...]) -> None:
    """Scale the GEMM rows priced from measurements (looked up or learned: they carry the measuring harness) by their
    part's public cuBLAS reference among `references` (`gemm_reference.time_factor`), no time below the roofline (in
    place); a roofline or composed price carries no harness and is left as it is."""
    measured = np.isin(priced["method"], [METHODS.index(m) for m in PRICED_METHODS])
    rows = np.flatnonzero((calls["family"] == "gemm").to_numpy() & measured)
    if not len(rows):
        return
    gemms = calls.iloc[rows]
    hw = hardware_arrays(gemms)
    work = PREDICTORS["gemm"].work(gemms, hw)
    factor = time_factor(gemms["dtype"].astype(str), hw, work.flops, work.bytes, references)
    if (factor == 1).all():
        return
    roofline = priced["roofline_ns"][rows]
    for name in ("duration_ns", "duration_low_ns", "duration_high_ns"):
        priced[name][rows] = np.maximum(priced[name][rows] * factor, roofline)
    priced["efficiency"][rows] = roofline / priced["duration_ns"][rows]


def _learned_ns(models: FamilyModels, family: str, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Device time (ns) the family's models predict for `calls` (the seen model on architectures it was trained on,
    else the transfer model), and the bytes each call moves."""
    predictor = PREDICTORS[family]
    hw = hardware_arrays(calls)
    work = predictor.work(calls, hw)
    features = features_of(predictor, calls, hw, work, with_hardware=True)
    seen = np.isin(hw.architecture, list(models.architectures))
    slowdown = np.empty(len(calls))
    for model, mask in ((models.seen, seen), (models.transfer, ~seen)):
        slowdown[mask] = model.log_slowdown(features, np.flatnonzero(mask))
    return np.maximum(work.roofline_s(hw), DEVICE_FLOOR_S) * 1e9 * np.exp(slowdown), work.bytes


def fused_rest(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the calls to Inductor-generated kernels of `INDUCTOR_ROW_FAMILIES` moving more bytes than their
    family counts for the row work itself, the bytes it counts and the extra bytes (the pointwise work fused
    into them)."""
    generated = (
        calls["family"].isin(INDUCTOR_ROW_FAMILIES) & calls["op"].isin(INDUCTOR_OPS) & calls["bytes"].notna()
    ).to_numpy()
    rows = np.flatnonzero(generated)
    own, rest = np.zeros(len(rows)), np.zeros(len(rows))
    families = calls["family"].to_numpy()[rows]
    for family in INDUCTOR_ROW_FAMILIES:
        at = families == family
        if at.any():
            row_calls = calls.iloc[rows[at]]
            counted = (
                PREDICTORS[family].count(row_calls, element_bytes(row_calls["dtype"]), hardware_arrays(row_calls)).bytes
            )
            own[at] = counted
            rest[at] = calls["bytes"].to_numpy(dtype="float64")[rows[at]] - counted
    more = rest > 0
    return rows[more], own[more], rest[more]


def _reference_calls(calls: pd.DataFrame, moved_bytes: np.ndarray) -> pd.DataFrame:
    """The reference kernel's calls moving `moved_bytes` each (same hardware, element type and row)."""
    itemsize = element_bytes(calls["dtype"])
    return calls.assign(
        family=REFERENCE_FAMILY,
        op=REFERENCE_KERNEL,
        operands=2.0,
        numel=np.maximum(np.round(moved_bytes / (3 * itemsize)), 1.0),
        batch=np.nan,
        m=np.nan,
        n=np.nan,
        k=np.nan,
        bytes=np.nan,
        flops=np.nan,
    )
