"""Kernels that are pieces of one op's work.

PyTorch's TensorIterator kernels (`gpu_kernel`: `at::native::*elementwise_kernel`; `gpu_reduce_kernel`:
`at::native::reduce_kernel`) index with 32 bits: an op whose operands span 2^31 bytes or more is split
(`TensorIteratorBase::with_32bit_indexing`, halving the largest dimension until every piece fits) and
each piece launches the same kernel over its part. The simulator sizes kernels without shapes of their
own by their enclosing op, so every piece would be priced as the whole op; `share_split_pieces` gives
each its share, in proportion to its grid (the pieces of one split are launched with grids covering
their own elements)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

SPLIT_KERNELS = re.compile(r"elementwise_kernel|reduce_kernel")
"""Kernel names of TensorIterator's launchers, which split at 32-bit offsets."""
INDEX_LIMIT_BYTES = 2**31
"""Operands spanning this many bytes or more are split (int32 offsets)."""
MAX_ELEMENT_BYTES = 8
"""The widest element a split op can have: ops of fewer than `INDEX_LIMIT_BYTES / MAX_ELEMENT_BYTES` elements
are never split."""


def share_split_pieces(calls: pd.DataFrame, kernel_names: dict, launched: np.ndarray, numel: np.ndarray) -> None:
    """Scale `numel` (in place) of the TensorIterator kernels an op launched several times, each to its grid's
    share of the op's elements, where the op is large enough to be split."""
    candidate = launched & (numel >= INDEX_LIMIT_BYTES / MAX_ELEMENT_BYTES)
    if not candidate.any():
        return
    rows = np.flatnonzero(candidate)
    names = calls["kernel_id"].iloc[rows].map(kernel_names).astype(str)
    rows = rows[names.str.contains(SPLIT_KERNELS).to_numpy()]
    if not len(rows):
        return
    grid = np.ones(len(rows))
    for axis in ("grid_x", "grid_y", "grid_z"):
        if axis in calls:
            grid *= calls[axis].iloc[rows].to_numpy(dtype="float64", na_value=1.0)
    pieces = pd.DataFrame(
        {"op": calls["op_id"].iloc[rows].to_numpy(), "kernel": calls["kernel_id"].iloc[rows].to_numpy(), "grid": grid}
    )
    group = pieces.groupby(["op", "kernel"], sort=False)["grid"]
    count, total = group.transform("size").to_numpy(), group.transform("sum").to_numpy()
    split = count > 1
    numel[rows[split]] *= grid[split] / total[split]
