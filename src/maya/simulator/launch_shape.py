"""How much a Triton GEMM template's tile slows it against the tile cuBLAS would pick: the learned GEMM model
prices a matrix product as the vendor library runs it, which picks its tile for the shape; a template runs the
tile its config names (`tile_m` x `tile_n`, from `BLOCK_M`/`BLOCK_N`).

The busiest SM runs ceil(tiles / SMs) tiles (one resident tile per SM, as `maya.estimators.families.gemm`
assumes; padding included). A tile's time per k step is the larger of its tile_m x tile_n multiply-adds and
its operand stream, tile_m + tile_n elements, times `BALANCED_INTENSITY` (the outputs per streamed element at
which a 128 x 128 tile, CUTLASS's bf16 default, is as compute- as operand-bound): smaller tiles quantise waves
more finely but stream more per output. A template takes its busiest SM's time over the least among the
library's candidate tiles (`UTILISATION_TILES`) as long, and never less (the model already prices the best
tile). Analytical, not fitted: it ranks a template's configs by tile fit, waves and operand traffic only; their
stages, warps and BLOCK_K tie. Every other call: 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

BALANCED_INTENSITY = 64.0
"""Outputs per streamed operand element, tile_m * tile_n / (tile_m + tile_n), of a 128 x 128 tile."""


def _busiest_sm(batch: np.ndarray, m: np.ndarray, n: np.ndarray, tile_m, tile_n, sms: int) -> np.ndarray:
    """Time of the busiest SM, in multiply-adds per k step."""
    tiles = batch * np.ceil(m / tile_m) * np.ceil(n / tile_n)
    return np.ceil(tiles / sms) * np.maximum(tile_m * tile_n, BALANCED_INTENSITY * (tile_m + tile_n))


def launch_factor(frame: pd.DataFrame, hardware: Hardware) -> np.ndarray:
    """Per row of a priced frame (work columns `batch`, `m`, `n`, `tile_m`, `tile_n`): the template's slowdown
    against the library's best candidate tile, else 1."""
    out = np.ones(len(frame))
    if "tile_m" not in frame:
        return out
    tile_m, tile_n = frame["tile_m"].to_numpy(dtype="float64"), frame["tile_n"].to_numpy(dtype="float64")
    m, n = frame["m"].to_numpy(dtype="float64"), frame["n"].to_numpy(dtype="float64")
    rows = np.flatnonzero(np.isfinite(tile_m) & np.isfinite(tile_n) & (tile_m > 0) & (tile_n > 0) & (m > 0) & (n > 0))
    if not len(rows):
        return out
    from maya.estimators.families.gemm import UTILISATION_TILES  # only here: the estimators' import is heavy

    batch = np.nan_to_num(frame["batch"].to_numpy(dtype="float64")[rows], nan=1.0)
    m, n = m[rows], n[rows]
    sms = hardware.sm_count
    best = np.min([_busiest_sm(batch, m, n, tm, tn, sms) for tm, tn in UTILISATION_TILES], axis=0)
    out[rows] = np.maximum(_busiest_sm(batch, m, n, tile_m[rows], tile_n[rows], sms) / best, 1.0)
    return out
