"""Spec-sheet figures of the hardware catalog as per-call arrays (one lookup per distinct name)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from maya.core import hardware
from maya_trace_spec.vocabulary import MATRIX_FAMILIES

L1_KIB_BY_ARCHITECTURE = {60: 24, 61: 48, 70: 128, 75: 96, 80: 192, 86: 128, 87: 192, 89: 128, 90: 256}
"""L1 data cache per SM (KiB; shared with shared memory from Volta on), from NVIDIA's architecture
whitepapers and tuning guides; other architectures use their shared memory per SM."""


@dataclass(frozen=True)
class HardwareArrays:
    """Per call: the catalog name and the figures the estimators use (SI units)."""

    name: np.ndarray
    architecture: np.ndarray
    """Compute capability as major * 10 + minor (GPUs of one architecture run the same kernels)."""
    peak_flops: np.ndarray
    fp32_peak_flops: np.ndarray
    """The fp32 (CUDA-core) peak: `peak_flops` over it is the tensor cores' speed-up for the call's dtype."""
    bandwidth: np.ndarray
    sm_count: np.ndarray
    l2_bytes: np.ndarray
    pcie_bandwidth: np.ndarray
    max_threads_per_sm: np.ndarray
    shared_mem_per_sm: np.ndarray
    """Bytes of shared memory (carved out of L1) per SM."""
    l1_bytes: np.ndarray
    """Bytes of L1 data cache per SM (`L1_KIB_BY_ARCHITECTURE`)."""
    boost_clock_hz: np.ndarray
    fp32_flops: np.ndarray
    """The spec sheet's FP32 (non-tensor) peak, FLOP/s: FP32 pipe instructions x 2 (an FMA is two FLOPs)."""


def catalog_names(names: pd.Series) -> pd.Series:
    """Catalog names for catalog or device names; `maya.core.hardware.UnknownHardware` names the first unknown."""
    codes, uniques = pd.factorize(names)
    resolved = [hardware.get(n).name for n in uniques]
    if resolved == list(uniques):
        return names
    return pd.Series(pa.array(resolved, type=pa.large_string()).take(codes), index=names.index, dtype="str")


def hardware_arrays(calls: pd.DataFrame) -> HardwareArrays:
    """Figures for every row of a normalised call frame (`hardware`, `family`, `dtype`)."""
    codes, uniques = pd.factorize(calls["hardware"])
    specs = [hardware.get(n) for n in uniques]

    def column(values: list[float]) -> np.ndarray:
        return np.asarray(values, dtype="float64")[codes]

    return HardwareArrays(
        name=np.array([s.name for s in specs], dtype=object)[codes],
        architecture=column([s.sm_major * 10 + s.sm_minor for s in specs]),
        peak_flops=_peak_flops(calls, codes, specs),
        fp32_peak_flops=column([s.peak_flops("fp32") for s in specs]),
        bandwidth=column([s.memory_bandwidth for s in specs]),
        sm_count=column([s.sm_count for s in specs]),
        l2_bytes=column([s.l2_bytes for s in specs]),
        pcie_bandwidth=column([s.pcie_gbs * 1e9 for s in specs]),
        max_threads_per_sm=column([s.max_threads_per_sm for s in specs]),
        shared_mem_per_sm=column([s.shared_mem_per_sm_bytes for s in specs]),
        l1_bytes=column(
            [
                L1_KIB_BY_ARCHITECTURE.get(s.sm_major * 10 + s.sm_minor, s.shared_mem_per_sm_bytes / 1024) * 1024
                for s in specs
            ]
        ),
        boost_clock_hz=column([s.boost_clock_mhz * 1e6 for s in specs]),
        fp32_flops=column([s.peak_flops("fp32") for s in specs]),
    )


def _peak_flops(calls: pd.DataFrame, codes: np.ndarray, specs: list[hardware.Hardware]) -> np.ndarray:
    """Per call: the peak of its dtype on tensor-core families, the fp32 peak on the others."""
    dtype_codes, dtypes = pd.factorize(calls["dtype"])
    tensor = calls["family"].isin(MATRIX_FAMILIES).to_numpy()
    table = np.array([[s.peak_flops(d) for d in dtypes] + [s.peak_flops("fp32")] for s in specs], dtype="float64")
    return table[codes, np.where(tensor, dtype_codes, len(dtypes))] if len(codes) else np.zeros(0)
