"""Multi-tensor kernels (optimizer steps, gradient norms and scales) sized by their launch grid.

torch's foreach and fused optimizers (`_foreach_*`, `_fused_adam(w)_`, AMP's `_amp_foreach_non_finite_check_and_
unscale_`), apex's and Transformer Engine's (`multi_tensor_adam`, `multi_tensor_l2norm`, `multi_tensor_scale`) run
`multi_tensor_apply_kernel`: a launch covers chunks of its tensor lists, one thread block per chunk of
`CHUNK_ELEMENTS` elements (ATen's `kChunkSize`; apex's and TE's `MultiTensorApply(2048 * 32)`, which Megatron-LM
and TE's optimizers use). The ops' tensor lists carry no sizes in a trace, so the grid is the size: blocks x
`CHUNK_ELEMENTS` elements of each list (an upper bound by less than one chunk per tensor: a tensor's last chunk is
partial). Unsized, such a kernel was priced as a launch, so a step's optimizer (Megatron's fp16 Adam over 2.8 B
parameters a GPU: ~150 GB of traffic) cost microseconds.

Each is priced as torch's vectorized add moving the same bytes (as Inductor's pointwise kernels are: one load per
element of each list read, one store per element of each list written, nothing else to wait on), with its lists'
element size from the kernel's functor (`f`: fp32; 4 bytes when not named):
- Adam (`adam` in the name: TE's `AdamFunctor`, ATen's `FusedAdamMathFunctor`, apex's): every list read (gradient,
  parameter, moments, a master copy), every one but the gradient written: `2 depth - 1` passes;
- `l2norm` (a gradient norm's partial sums) reads its lists: `depth` passes;
- TE's and apex's `multi_tensor_scale` (an in list and an out list): one pass of each, of its functor's two types;
- ATen's foreach functors (`<T, depth, r_args_depth, res_arg_index>`): the `r_args_depth` lists read, one written;
- any other: every list read, one written back (`depth + 1`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from maya.estimators.calls import MULTI_TENSOR_OP
from maya_trace_spec.vocabulary import DTYPE_BYTES

MULTI_TENSOR_KERNEL = re.compile(r"multi_tensor_apply_kernel")
CHUNK_ELEMENTS = 2048 * 32
"""Elements of one list a block of `multi_tensor_apply_kernel` covers: ATen's `kChunkSize` (MultiTensorApply.cuh),
apex's and Transformer Engine's `MultiTensorApply(2048 * 32)`."""
DEPTH = re.compile(r"TensorListMetadataILi(\d+)E")
"""The number of tensor lists (`TensorListMetadata<depth>`, ATen's `FusedOptimizerTensorListMetadata<depth>`)."""
TYPE_CODE = r"(f|d|6__half|N3c104HalfE|N3c108BFloat16E|13__nv_bfloat16)"
FUNCTOR_TYPE = re.compile(r"FunctorI" + TYPE_CODE + TYPE_CODE + "?")
"""The first two template arguments of the kernel's functor: the element type of its lists (the first), and of a
scale's output list (TE's and apex's `ScaleFunctor<in, out>`)."""
TYPE_NAMES = {
    "f": "fp32",
    "d": "fp64",
    "6__half": "fp16",
    "N3c104HalfE": "fp16",
    "N3c108BFloat16E": "bf16",
    "13__nv_bfloat16": "bf16",
}
ATEN_FUNCTOR_DEPTHS = re.compile(r"FunctorI[^L]*Li(\d+)ELi(\d+)ELi(\d+)E")
"""ATen's foreach functors' `<T, depth, r_args_depth, res_arg_index>`."""


def traffic(kernel: str) -> tuple[float, float, str] | None:
    """(bytes moved per element of a list, lists read, their element type) of a multi-tensor kernel named `kernel`;
    None when it is not one or its depth is not in its name."""
    if not MULTI_TENSOR_KERNEL.search(kernel):
        return None
    found = DEPTH.search(kernel)
    if found is None:
        return None
    depth = int(found.group(1))
    named = FUNCTOR_TYPE.search(kernel)
    dtype = TYPE_NAMES[named.group(1)] if named else "fp32"
    itemsize = DTYPE_BYTES[dtype]
    lower = kernel.lower()
    aten = ATEN_FUNCTOR_DEPTHS.search(kernel)
    if "adam" in lower:
        reads, passes = depth, 2 * depth - 1
    elif "l2norm" in lower:
        reads, passes = depth, depth
    elif "multi_tensor_scale" in lower and depth == 2:  # one list in, one out, each of its functor's type
        out = TYPE_NAMES[named.group(2)] if named and named.group(2) else dtype
        return itemsize + DTYPE_BYTES[out], 1.0, dtype
    elif aten is not None:
        reads = int(aten.group(2))
        passes = reads + 1
    else:
        reads, passes = depth, depth + 1
    return passes * itemsize, float(reads), dtype


def fill(
    calls: pd.DataFrame,
    kernel_names: np.ndarray,
    launched: np.ndarray,
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    num: dict[str, np.ndarray],
) -> np.ndarray:
    """Size every launched multi-tensor kernel with a grid by its blocks and frame it as the elementwise add moving
    its traffic (in place); returns which rows."""
    codes, names = pd.factorize(pd.Series(kernel_names, dtype=object))
    table = [traffic(str(name)) for name in names]
    if "grid_x" not in calls:
        return np.zeros(len(calls), dtype=bool)
    blocks = calls["grid_x"].to_numpy(dtype="float64", na_value=np.nan)
    for dim in ("grid_y", "grid_z"):  # one-dimensional launches; absent is 1
        if dim in calls:
            blocks = blocks * calls[dim].to_numpy(dtype="float64", na_value=1.0)
    sized = np.array([t is not None for t in table] + [False])[codes]  # code -1 (no name): the last entry
    rows = launched & sized & np.isfinite(blocks) & (blocks > 0)
    for i in np.flatnonzero(rows):
        per_element, reads, dtype[i] = table[codes[i]]
        numel = blocks[i] * CHUNK_ELEMENTS
        family[i], op[i] = "elementwise", MULTI_TENSOR_OP
        num["numel"][i], num["row"][i], num["operands"][i] = numel, CHUNK_ELEMENTS, reads
        num["work_bytes"][i] = per_element * numel
    return rows
