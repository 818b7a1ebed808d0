"""What a family predictor is: how a call's work is counted and how its shape is described to the
learned efficiency model. The learning itself is shared (`maya.estimators.efficiency_model`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from ..calls import INDUCTOR_KINDS, element_bytes, inductor_op
from ..hardware_table import HardwareArrays

MIN_ROOFLINE_S = 1e-9
"""Numerical guard: a call with no counted work still takes a nanosecond."""


@dataclass(frozen=True)
class Work:
    """FLOPs and bytes of memory traffic per call; `bandwidth` where the traffic is not to HBM."""

    flops: np.ndarray
    bytes: np.ndarray
    bandwidth: np.ndarray | None = None

    def roofline_s(self, hw: HardwareArrays) -> np.ndarray:
        """The analytical lower bound: compute time or memory time, whichever is longer."""
        bandwidth = hw.bandwidth if self.bandwidth is None else self.bandwidth
        return np.maximum(np.maximum(self.flops / hw.peak_flops, self.bytes / bandwidth), MIN_ROOFLINE_S)


PriceCalls = Callable[[pd.DataFrame], pd.DataFrame]
"""Prices a call frame of other families: `KernelEstimator.predict` (columns `duration_ns`, `duration_low_ns`,
`duration_high_ns`, ...)."""


@dataclass(frozen=True)
class Composed:
    """Seconds per call composed from other families' predictions and spec-sheet rates, with the band those
    predictions carry."""

    seconds: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray


class FamilyPredictor:
    """One kernel family. Subclasses define `family`, `ops` (the op vocabulary the model sees as a
    category), `count` (work from the shape) and `shape_features`."""

    family: ClassVar[str]
    ops: ClassVar[tuple[str, ...]] = ()
    same_kernel: ClassVar[dict[str, str]] = {}
    """Op names of one source that run the kernel another name stands for (NeuSight's `ln` is torch's
    `native_layer_norm`): `kernel_names` maps them so."""
    explicit_work: ClassVar[bool] = True
    """Whether the call frame's `bytes`/`flops` columns replace the counted work."""
    composed_from: ClassVar[str | None] = None
    """The family whose learned model prices most of a `compose`d call (its errors are that model's: the
    iteration band draws them with that family's)."""

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        raise NotImplementedError

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def work(self, calls: pd.DataFrame, hw: HardwareArrays) -> Work:
        counted = self.count(calls, element_bytes(calls["dtype"]), hw)
        if not self.explicit_work:
            return counted
        given_bytes, given_flops = calls["bytes"].to_numpy(), calls["flops"].to_numpy()
        return Work(
            flops=np.where(np.isnan(given_flops), counted.flops, given_flops),
            bytes=np.where(np.isnan(given_bytes), counted.bytes, given_bytes),
            bandwidth=counted.bandwidth,
        )

    def kernel_names(self, op: pd.Series) -> np.ndarray:
        """Each call's op as the kernel it runs (`same_kernel`), as an object array."""
        positions, names = pd.factorize(op)
        kernels = np.array([self.same_kernel.get(n, n) for n in names] + [""], dtype=object)
        return kernels[positions]

    def compose(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> Composed | None:
        """Without a learned model of its own, the family's time composed from mechanisms (other families'
        predictions via `price`, spec-sheet rates); None: the analytical roofline."""
        return None

    def op_codes(self, calls: pd.DataFrame) -> np.ndarray:
        """Index in `ops` of the kernel each call's op runs (`same_kernel`: ops of one kernel share a code); NaN
        (missing, for the model) when not in the vocabulary. Looked up once per distinct op."""
        positions, names = pd.factorize(calls["op"])
        kernels = [self.same_kernel.get(n, n) for n in names]
        table = np.append(pd.Index(self.ops).get_indexer(np.asarray(kernels, dtype=object)).astype("float64"), -1.0)
        table[table < 0] = np.nan
        return table[positions]  # position -1 (a missing op) takes the last entry, NaN


def inductor_kernels(
    forward: str, backward: str | None = None, kinds: tuple[str, ...] = INDUCTOR_KINDS
) -> dict[str, str]:
    """`same_kernel` entries pricing Inductor's generated kernels of `kinds` as the family's eager kernel of the same
    work: `forward`, and `backward` (default `forward`) for those of a backward pass."""
    return {
        **{inductor_op(kind): forward for kind in kinds},
        **{inductor_op(kind, backward=True): backward or forward for kind in kinds},
    }


def log2(values: np.ndarray) -> np.ndarray:
    """log2 of positive finite sizes; NaN where the size is absent, not positive or infinite."""
    values = np.asarray(values, dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.log2(values, out=np.empty_like(values))
    result[~np.isfinite(result)] = np.nan  # log2 is finite exactly where the size is positive and finite
    return result


def alignment_bits(values: np.ndarray, cap: int = 8) -> np.ndarray:
    """Trailing zero bits of integer sizes, capped (vector loads and tile fit); NaN where absent."""
    values = np.asarray(values, dtype="float64")
    present = np.isfinite(values) & (values >= 1)
    ints = np.where(present, values, 1).astype(np.int64)
    bits = np.log2((ints & -ints).astype("float64"))
    return np.where(present, np.minimum(bits, cap), np.nan)


def count_or_one(values: pd.Series) -> np.ndarray:
    return values.fillna(1.0).to_numpy()
