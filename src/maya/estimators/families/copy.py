"""Copies and memsets: `bytes` is the payload (as in `api_calls.bytes`), else `numel` elements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, log2

HOST_OPS = ("HtoD", "DtoH", "memcpy_h2d", "memcpy_d2h")
"""Copies that cross PCIe (priced at the GPU's PCIe bandwidth)."""
SET_OPS = ("memset", "cuda_memset", "fill_zero")
"""Writes only."""


class CopyPredictor(FamilyPredictor):
    family = "copy"
    ops = (
        "DtoD",
        "HtoD",
        "DtoH",
        "PtoP",
        "memcpy_d2d",
        "memcpy_h2d",
        "memcpy_d2h",
        "memset",
        "cuda_memset",
        "fill_zero",
        "copy_cast",
        "copy_transpose",
    )
    explicit_work = False

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        payload = payload_bytes(calls, itemsize)
        host = calls["op"].isin(HOST_OPS).to_numpy()
        # a device copy reads and writes its payload; a memset or a PCIe transfer moves it once
        once = host | calls["op"].isin(SET_OPS).to_numpy()
        passes = np.where(once, 1.0, 2.0)
        return Work(
            flops=np.zeros(len(calls)),
            bytes=payload * passes,
            bandwidth=np.where(host, hw.pcie_bandwidth, hw.bandwidth),
        )

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        payload = payload_bytes(calls, np.ones(len(calls)))
        return {"log2_payload": log2(payload), "log2_payload_per_l2": log2(payload / hw.l2_bytes)}


def payload_bytes(calls: pd.DataFrame, itemsize: np.ndarray) -> np.ndarray:
    return np.where(calls["bytes"].notna(), calls["bytes"].to_numpy(), itemsize * calls["numel"].to_numpy())
