"""Call frames as the kernel estimators read them (`KernelEstimator.predict`, through `calls.normalize`):
generated frames whose columns may be missing, duplicated, extra or of any type, with values from the
vocabularies and outside them (unknown GPUs, families, dtypes; negative, infinite, huge, NaN or textual
sizes), priced by a roofline-only estimator and by a small trained one. A frame is refused with a
`CallFrameError` or `UnknownHardware`, or every call gets a duration that is NaN (not priceable) or finite and
non-negative, inside its band."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface

from maya.core.hardware import UnknownHardware, names
from maya.estimators import CallFrameError, KernelEstimator
from maya.estimators.calls import NUMERIC_COLUMNS
from maya.estimators.kernel_estimator import METHODS
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES

OPS = ["bmm", "linear", "add", "mul", "gelu", "layer_norm_fwd", "softmax_fwd", "ln", "softmax", "", "sdpa_fwd"]
sizes = st.one_of(
    st.integers(0, 1 << 14),
    st.integers(0, 1 << 14),
    st.integers(-(1 << 20), 1 << 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1e30),
    st.none(),
    st.sampled_from(["12", "abc", "", "1e3", "inf"]),
    st.booleans(),
)
texts = {
    "hardware": st.one_of(
        st.sampled_from(names()),
        st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla T4", "tpu-v5", ""]),
        st.text(max_size=6),
        st.none(),
        sizes,
    ),
    "family": st.one_of(st.sampled_from(KERNEL_FAMILIES), st.sampled_from(["conv", "GEMM", ""]), st.none(), sizes),
    "dtype": st.one_of(st.sampled_from(list(DTYPE_BYTES)), st.sampled_from(["float32", "fp4", ""]), st.none(), sizes),
    "op": st.one_of(st.sampled_from(OPS), st.text(max_size=6), st.none(), sizes),
}


@dataclass(frozen=True)
class FrameInput:
    columns: tuple[tuple[str, tuple[Any, ...]], ...]
    rows: int
    arrow: bool
    index: str
    trained: bool

    def frame(self) -> pd.DataFrame | pa.Table:
        names_ = [c for c, _ in self.columns]
        frame = pd.DataFrame(
            {
                f"_{i}": pd.Series(list(v[: self.rows]) + [None] * (self.rows - len(v[: self.rows])), dtype=object)
                for i, (_, v) in enumerate(self.columns)
            }
        )
        frame.columns = names_  # duplicates allowed
        if self.index == "shuffled":
            frame.index = list(range(self.rows))[::-1]
        elif self.index == "duplicated":
            frame.index = [0] * self.rows
        if not self.arrow:
            return frame.infer_objects()
        try:
            return pa.Table.from_pandas(frame.infer_objects(), preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError):
            return frame.infer_objects()


@st.composite
def frame_inputs(draw) -> FrameInput:
    rows = draw(st.integers(0, 6))
    wanted = (
        ["hardware", "family"] if draw(st.integers(0, 9)) else draw(st.lists(st.sampled_from(["hardware", "family"])))
    )
    extra = draw(st.lists(st.sampled_from(["op", "dtype", *NUMERIC_COLUMNS, "extra", "m"]), max_size=8))
    columns = []
    plain = draw(st.integers(0, 3)) > 0  # mostly values from the vocabularies, sizes in range
    for name in [*wanted, *extra]:
        if name in texts:
            values = draw(
                st.lists(
                    st.sampled_from(
                        {
                            "hardware": names()[:6],
                            "family": list(KERNEL_FAMILIES),
                            "dtype": ["fp32", "bf16", "fp16", "tf32"],
                            "op": OPS,
                        }[name]
                    )
                    if plain
                    else texts[name],
                    min_size=rows,
                    max_size=rows,
                )
            )
        else:
            values = draw(st.lists(st.integers(0, 1 << 13) if plain else sizes, min_size=rows, max_size=rows))
        columns.append((name, tuple(values)))
    return FrameInput(
        tuple(columns),
        rows,
        draw(st.booleans()),
        draw(st.sampled_from(["plain", "plain", "shuffled", "duplicated"])),
        draw(st.booleans()),
    )


@lru_cache(maxsize=1)
def trained() -> KernelEstimator:
    from maya.estimators import TrainConfig, train
    from maya.estimators.efficiency_model import ModelParams
    from maya.estimators.training_data import shipped_measurements

    measurements = shipped_measurements(neusight=True).sample(3000, random_state=0).reset_index(drop=True)
    return train(measurements, TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)).estimator


def check(x: FrameInput) -> None:
    estimator = trained() if x.trained else KernelEstimator()
    calls = x.frame()
    priced = estimator.predict(calls)
    if len(priced) != x.rows:
        raise Corrupt(f"{len(priced)} predictions for {x.rows} calls")
    if isinstance(calls, pd.DataFrame) and not priced.index.equals(calls.index):
        raise Corrupt("predictions lost the frame's index")
    if not priced["method"].isin(METHODS).all():
        raise Corrupt(f"methods {set(priced['method'])}")
    for column in ("duration_ns", "duration_low_ns", "isolated_ns", "roofline_ns"):
        values = priced[column].to_numpy(dtype="float64")
        if np.isinf(values).any() or (values < 0).any():
            raise Corrupt(f"{column} {values}")
    duration, low, high = (
        priced[c].to_numpy(dtype="float64") for c in ("duration_ns", "duration_low_ns", "duration_high_ns")
    )
    with np.errstate(invalid="ignore"):
        if (low > duration * (1 + 1e-9)).any() or (duration > high * (1 + 1e-9)).any():
            raise Corrupt(f"durations {duration} outside their bands [{low}, {high}]")


def surfaces() -> list[Surface]:
    trained()  # trained once, outside the inputs' time limit
    return [
        Surface(
            "estimator call frame",
            frame_inputs(),
            check,
            errors=(CallFrameError, UnknownHardware),
            describe=lambda e: str(e),
        )
    ]
