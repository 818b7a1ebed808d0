"""Which learned model of its family prices a call. A family's calls run different kernels on different units
depending on their element type: GEMMs and attention on the tensor cores (fp16, bf16, tf32, fp8) or on the
CUDA cores (fp32), the row-wise and elementwise families as 16-bit or 32-bit vector kernels of different widths.
Each such segment learns a model of its own, so measurements of one (Vidur's fp16 operators, timed on the
device) do not move the predictions of another (NeuSight's fp32 kernels, timed call by call). A call whose
segment was never measured is priced by another segment's model of its family."""

from __future__ import annotations

import numpy as np
import pandas as pd

from maya_trace_spec.vocabulary import MATRIX_FAMILIES

from .calls import element_bytes
from .hardware_table import HardwareArrays

WIDTH_FAMILIES = ("elementwise", "normalization", "embedding", "softmax", "reduction")
"""Segmented by element width: `narrow` (under 4 bytes) or `wide`."""
SEGMENT_DTYPES = {"narrow": "fp16", "wide": "fp32"}
"""The element type another segment's model prices a call at (`KernelEstimator._price_unmeasured_kernels`)."""
SEPARATOR = "@"


def segments(family: str, calls: pd.DataFrame, hw: HardwareArrays) -> np.ndarray:
    """Each call's segment within `family` ("" for families that are not segmented)."""
    codes, names = segment_codes(family, calls, hw)
    return np.asarray(names, dtype=object)[codes]


def segment_codes(family: str, calls: pd.DataFrame, hw: HardwareArrays) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each call's segment as an index into the family's segment names (cheaper to group by than the names)."""
    if family in MATRIX_FAMILIES:  # by the unit that runs them: `tensor` (the dtype's peak is above fp32's) or `cuda`
        return (hw.peak_flops <= hw.fp32_peak_flops).astype("int8"), ("tensor", "cuda")
    if family in WIDTH_FAMILIES:
        return (element_bytes(calls["dtype"]) >= 4).astype("int8"), ("narrow", "wide")
    return np.zeros(len(calls), dtype="int8"), ("",)


def model_key(family: str, segment: str) -> str:
    """`gemm@tensor`, or the family's name where it is not segmented."""
    return f"{family}{SEPARATOR}{segment}" if segment else family


def family_of(key: str) -> str:
    return key.split(SEPARATOR, 1)[0]
