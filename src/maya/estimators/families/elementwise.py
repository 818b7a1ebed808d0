"""Pointwise kernels: arithmetic, activations, dropout (`operands` tensors in, one out)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..calls import MULTI_TENSOR_OP
from ..hardware_table import HardwareArrays
from .base import FamilyPredictor, Work, alignment_bits, inductor_kernels, log2
from .rowwise import THREADS_PER_SM


class ElementwisePredictor(FamilyPredictor):
    family = "elementwise"
    ops = (
        "add",
        "addu",
        "sub",
        "mul",
        "mulu",
        "div",
        "divu",
        "pow",
        "powu",
        "relu",
        "gelu",
        "tanh",
        "silu",
        "gelu_fwd",
        "gelu_bwd",
        "silu_fwd",
        "silu_bwd",
        "dropout_fwd",
        "dropout_bwd",
        "fill",
        "cast",
        "silu_and_mul",
        "rotary_embedding",
    )
    """`silu_and_mul` and `rotary_embedding` are vLLM's fused kernels, measured by Vidur (`vidur_data`)."""
    same_kernel = {
        "gelu_fwd": "gelu",
        "gelu_bwd": "gelu_backward",
        "silu_fwd": "silu",
        "silu_bwd": "silu_backward",
        **inductor_kernels("add", kinds=("pointwise",)),
        MULTI_TENSOR_OP: "add",
        "native_dropout": "add",
        "native_dropout_backward": "add",
    }
    """The profiler's names for torch's activation kernels; Inductor's pointwise kernels, the multi-tensor kernels of
    optimizer steps (`simulator.multi_tensor`) and torch's dropout kernels as traced (`simulator.work.DROPOUT_KERNELS`)
    run as torch's vectorized add moving the same bytes (one load per input and one store per output element, nothing
    else to wait on)."""

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        numel = calls["numel"].to_numpy()
        return Work(flops=numel, bytes=itemsize * numel * (calls["operands"].to_numpy() + 1))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        numel = calls["numel"].to_numpy()
        return {
            "log2_numel": log2(numel),
            "log2_row": log2(calls["row"].to_numpy()),
            "row_alignment": alignment_bits(calls["row"].to_numpy()),
            "operands": calls["operands"].to_numpy(),
            "log2_thread_waves": log2(numel / (hw.sm_count * THREADS_PER_SM)),
        }
