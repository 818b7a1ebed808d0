"""The tensor-core GEMM price anchored to public cuBLAS measurements on the parts they were taken on.

Maya's tensor-core GEMM model learns from one source, Vidur's fp16 operators (`vidur_data`): the kernels of a whole
Llama layer's forward pass under the torch profiler. On the same parts, independent public cuBLAS measurements of
compute-bound GEMMs (`data/kernels_public/`: a community torch.matmul square sweep and fast.cu's cuBLAS baseline on an
H100 SXM5; gpu-fryer's 8192^3 bf16 and TF32 on an A100 SXM4 80GB) run faster than the model prices them, by about the
same factor wherever they fall, while Vidur's own rows are priced without bias (`benchmarks/gemm_bias.py`, sections 1
and 3). Vidur's A100 reads 231.6 TFLOP/s at 8192^3 (tokens, output and input features all 8192), gpu-fryer's
cuBLASLt 270 on the same shape after 60 s at the 400 W cap (and 271.2 the best short-loop shape of the MAMF finder,
257 with randn inputs in 2022's cuBLAS): the offset is the measurement's, not the shape's, and no feature of the call
frame can learn it from Vidur's rows alone.

The mechanism: the learned price carries Vidur's harness, a rate `ratio` times below public cuBLAS on compute-bound
calls of the part. The time a call's tensor cores set is sped up by it, the time its memory traffic sets is not:
with `s` the compute share of the call's roofline (FLOPs / peak over the larger of that and bytes / bandwidth),
`time' = time * (1 - s + s / ratio)`, on calls of at least `MIN_FLOPS` (the reference rows' range); GEMMs under
`MIN_FLOPS / 10` are launch-bound and keep the learned time, and the decade between ramps in (`time_factor`). The calibration applies to the reference part and to parts of the same silicon
and power envelope (architecture, SM count, boost clock and board power: an A100 SXM4 40GB or an A800 prices as the
80GB, an H800 or H200 as the H100 SXM), not to a PCIe or NVL part whose cap binds lower (an A100 PCIe 40GB at 250 W
sustains 224 TFLOP/s against the SXM's 270), nor to GPUs with no public cuBLAS row (the A40, any part of another
architecture: their price stays the learned one). It applies to the dtypes the reference rows were measured in
(bf16, fp16, TF32): fp8 GEMMs (DeepGEMM, `_scaled_mm`) run other kernels and keep the learned price.

Each `ratio` is the median over the part's reference rows (`reference_rows`) of measured rate / learned rate, with
v1 (the demo's estimator: 20,000 shipped rows) pricing them, read off `benchmarks/gemm_bias.py` section 3.
Which rows: cuBLAS (torch.matmul / torch.mm / cuBLAS / cuBLASLt) in a 16-bit or TF32 tensor-core dtype, compute-bound
(>= `MIN_FLOPS`: the 1024^3 calls are launch-bound); not the best shape of a brute-force sweep (MAMF finder: the
fastest of thousands of shapes is selected for being fast); on Hopper not the rows at the sustained clock either
(gpu-fryer's >= 60 s runs: the simulator derates a step's tensor-core work to the sustained clock itself,
`simulator.sustained_clock`, from the burst price this calibrates to).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from maya.core import hardware

from .hardware_table import HardwareArrays

if TYPE_CHECKING:  # kernel_estimator imports this module
    from .kernel_estimator import KernelEstimator

MIN_FLOPS = 1e10
"""Reference rows are compute-bound GEMMs of at least this many FLOPs (2,048^3 and up)."""
REFERENCE_DTYPES = ("bf16", "fp16", "tf32")
"""Tensor-core dtypes Vidur's fp16 model prices (fp8's kernels, DeepGEMM and `_scaled_mm`, are not cuBLAS's GEMMs)."""
CUBLAS = r"cuBLAS|torch\.mm|torch\.matmul"
"""A public row's `kernel_impl` that is cuBLAS (fast.cu's hand-written kernels, Triton and DeepGEMM are not)."""
BEST_OF_SWEEP = ("mamf_table",)
"""Sources reporting the best shape of a brute-force sweep (left out: selected for being fast)."""
SUSTAINED = ("gpu_fryer_1.0.0", "gpu_fryer_1.1.0")
"""Sources timed at the sustained clock (>= 60 s back to back)."""
BURST_ONLY_ARCHITECTURES = (90,)
"""Architectures whose sustained GEMM rate sits below the burst (Hopper's power cap): their references are burst rows."""


@dataclass(frozen=True)
class Reference:
    """One part's public cuBLAS rate over the learned one on compute-bound tensor-core GEMMs."""

    part: str
    ratio: float
    rows: int
    source: str

    def same_envelope(self, part: hardware.Hardware) -> bool:
        """Whether `part` is the reference's silicon at its clock and board power."""
        ref = hardware.get(self.part)
        return (part.sm_major, part.sm_minor, part.sm_count, part.boost_clock_mhz, part.tdp_w) == (
            ref.sm_major,
            ref.sm_minor,
            ref.sm_count,
            ref.boost_clock_mhz,
            ref.tdp_w,
        )


REFERENCES: dict[str, Reference] = {
    "a100-sxm-80gb": Reference(
        part="a100-sxm-80gb",
        ratio=1.104,
        rows=2,
        source="gpu-fryer 1.1.0 (cuBLASLt, 8192^3, >= 60 s): bf16 270 TFLOP/s (learned 1.133x slower), TF32 130 (1.076x)",
    ),
    "h100-sxm": Reference(
        part="h100-sxm",
        ratio=1.056,
        rows=14,
        source="torch.matmul square sweep 2048-10240 bf16/fp16/TF32 (zzc0721 issue #79) and fast.cu's cuBLAS "
        "baseline 4096^3 / 8192^3 bf16",
    ),
}
"""Per reference part (catalog name): its calibration, from `benchmarks/gemm_bias.py` section 3 with v1."""


def reference_of(name: str) -> Reference | None:
    """The reference whose envelope the catalog part `name` shares, None when none does."""
    part = hardware.get(name)
    return next((r for r in REFERENCES.values() if r.same_envelope(part)), None)


def time_factor(dtype: pd.Series, hw: HardwareArrays, flops: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """Per GEMM call, the factor its learned time is multiplied by: `1 - s + s / ratio` on a tensor-core call in a
    reference dtype (`REFERENCE_DTYPES`: fp8 was not measured in them) of at least `MIN_FLOPS` on a part with a
    reference (`s` the compute share of its roofline), 1 under `MIN_FLOPS / 10`: the reference rows are all >=
    `MIN_FLOPS`, and a smaller GEMM's time is mostly its launch (a 512^3 bf16 one on an A100 is 7.4 us), which they
    say nothing of. In the decade between, the ratio is taken to the power of the call's place in it (log10 of FLOPs),
    so the price has no step: a GEMM a little larger never prices faster than a smaller one of the same shape family."""
    factor = np.ones(len(flops))
    tensor = (
        (hw.peak_flops > hw.fp32_peak_flops)
        & dtype.isin(REFERENCE_DTYPES).to_numpy()
        & (np.asarray(flops) > MIN_FLOPS / 10)
    )
    weight = np.clip(np.log10(np.maximum(np.asarray(flops, dtype="float64"), 1.0) / MIN_FLOPS) + 1.0, 0.0, 1.0)
    codes, names = pd.factorize(pd.Series(hw.name))
    for code, name in enumerate(names):
        ref = reference_of(str(name))
        rows = (codes == code) & tensor
        if ref is None or not rows.any():
            continue
        compute_s = flops[rows] / hw.peak_flops[rows]
        memory_s = moved[rows] / hw.bandwidth[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.nan_to_num(compute_s / np.maximum(compute_s, memory_s), nan=0.0)
        factor[rows] = 1 - share + share / ref.ratio ** weight[rows]
    return factor


def reference_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The public rows of a GEMM frame (`source` kp:<source_id>, `impl`, call-frame columns) a reference is derived
    from: cuBLAS, a reference dtype, at least `MIN_FLOPS`, not a sweep's best shape, on Hopper not sustained."""
    source = rows["source"].astype(str).str.removeprefix("kp:")
    flops = 2 * rows["batch"].fillna(1.0) * rows["m"] * rows["n"] * rows["k"]
    codes, parts = pd.factorize(rows["hardware"])
    capability = np.array([hardware.get(p).sm_major * 10 + hardware.get(p).sm_minor for p in parts] + [0])
    architecture = pd.Series(capability[codes], index=rows.index)
    chosen = (
        rows["source"].astype(str).str.startswith("kp:")
        & rows["impl"].fillna("").str.contains(CUBLAS)
        & rows["dtype"].isin(REFERENCE_DTYPES)
        & (flops >= MIN_FLOPS)
        & ~source.isin(BEST_OF_SWEEP)
        & ~(source.isin(SUSTAINED) & architecture.isin(BURST_ONLY_ARCHITECTURES))
    )
    return rows[chosen]


def uncalibrated(estimator: KernelEstimator) -> KernelEstimator:
    """The estimator with its learned GEMM price alone (`KernelEstimator.gemm_reference` off)."""
    return replace(estimator, gemm_reference=False)
