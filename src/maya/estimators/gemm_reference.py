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

Each `ratio` belongs to the estimator version it corrects: training derives it (`derive`) as the median over the
part's reference rows (`reference_rows`) of the version's learned time over the measured one (`benchmarks/gemm_bias.py`
section 3), and the artifact stores it with the rows used and the sources the tensor-core GEMM model learned from
(`GemmReferences`). Only a part whose tensor-core GEMMs were learned from Vidur's rows (`HARNESS_SOURCE`, on a part of
its envelope) gets one: a version that learned them from other measurements (a user's own profiles of the part)
carries that harness, not Vidur's, and keeps its learned price. An artifact from before versions recorded their own
has v1's ratios if it is v1's artifact (`V1_ARTIFACT_SHA256`: they were read off it by hand, 1.104 and 1.056), none
otherwise.

Which rows: cuBLAS (torch.matmul / torch.mm / cuBLAS / cuBLASLt) in a 16-bit or TF32 tensor-core dtype, compute-bound
(>= `MIN_FLOPS`: the 1024^3 calls are launch-bound); not the best shape of a brute-force sweep (MAMF finder: the
fastest of thousands of shapes is selected for being fast); on Hopper not the rows at the sustained clock either
(gpu-fryer's >= 60 s runs: the simulator derates a step's tensor-core work to the sustained clock itself,
`simulator.sustained_clock`, from the burst price this calibrates to).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from maya.core import hardware

from .hardware_table import HardwareArrays, catalog_names, hardware_arrays
from .segments import segments

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
HARNESS_SOURCE = "vidur"
"""The training source whose harness the references correct (`vidur_data.SOURCE`, the `source` of Vidur's rows)."""
UNNAMED_SOURCE = "unnamed"
"""The source of training rows given without a `source` column."""
PRICED_METHODS = ("lookup", "model", "model_transfer")
"""Prices made from measurements, which carry their harness (`kernel_estimator.METHODS`)."""


@dataclass(frozen=True)
class Reference:
    """One part's public cuBLAS rate over the learned one on compute-bound tensor-core GEMMs."""

    part: str
    ratio: float
    rows: tuple[str, ...]
    """The public rows' `row_id`s (`data/kernels_public/`) the ratio is the median over."""
    sources: tuple[str, ...]
    """Their `source_id`s."""

    def same_envelope(self, part: hardware.Hardware) -> bool:
        """Whether `part` is the reference's silicon at its clock and board power."""
        return same_envelope(hardware.get(self.part), part)

    def to_json(self) -> dict:
        return {"part": self.part, "ratio": self.ratio, "rows": list(self.rows), "sources": list(self.sources)}

    @classmethod
    def from_json(cls, entry: dict) -> Reference:
        return cls(entry["part"], float(entry["ratio"]), tuple(entry["rows"]), tuple(entry["sources"]))


@dataclass(frozen=True)
class GemmReferences:
    """An estimator version's references and what they answer for: the sources its tensor-core GEMM model learned
    from per part (catalog name), and a note on how they were found or why there are none."""

    references: tuple[Reference, ...] = ()
    learned_from: dict[str, tuple[str, ...]] = field(default_factory=dict)
    note: str = "none: built without training (no sources recorded)"

    def ratios(self) -> str:
        """Each part's ratio (`a100-sxm-80gb 1.104, h100-sxm 1.056`), or `none`."""
        return ", ".join(f"{r.part} {r.ratio:.3f}" for r in self.references) or "none"

    def to_json(self) -> dict:
        return {
            "references": [r.to_json() for r in self.references],
            "learned_from": {part: list(sources) for part, sources in sorted(self.learned_from.items())},
            "note": self.note,
        }

    @classmethod
    def from_json(cls, entry: dict) -> GemmReferences:
        return cls(
            tuple(Reference.from_json(r) for r in entry["references"]),
            {part: tuple(sources) for part, sources in entry["learned_from"].items()},
            entry["note"],
        )


NONE = GemmReferences(note="none: off (the learned price alone)")
"""No reference: the learned GEMM price alone (`uncalibrated`)."""
V1_ARTIFACT_SHA256 = "94cb3142d3dfea4de309acf35b1e31de6250ce984c1e60dd362894f746194c66"
"""The SHA-256 of estimator v1's artifact (the demo's: 20,000 shipped rows, data hash 8b01adae...), which predates
references stored with their version."""
V1 = GemmReferences(
    references=(
        Reference("a100-sxm-80gb", 1.104, ("gemm_sustained-0026", "gemm_sustained-0027"), ("gpu_fryer_1.1.0",)),
        Reference(
            "h100-sxm",
            1.056,
            (
                "gemm-0084",
                "gemm-0086",
                "gemm-0090",
                "gemm-0091",
                "gemm-0092",
                "gemm-0093",
                "gemm-0095",
                "gemm-0096",
                "gemm-0097",
                "gemm-0098",
                "gemm-0100",
                "gemm-0101",
                "gemm-0102",
                "gemm-0103",
            ),
            ("fastcu_readme", "zzc_issue79_h100"),
        ),
    ),
    learned_from={part: (HARNESS_SOURCE,) for part in ("a100-sxm-80gb", "a40", "h100-sxm")},
    note="v1's ratios as read off it by hand (benchmarks/gemm_bias.py section 3), before versions stored their own",
)
"""v1's references (its artifact carries none): what `derive` gives v1 to three decimals (1.1042, 1.0561)."""
NOT_RECORDED = GemmReferences(
    note="none: the artifact predates references stored with their version (train a new version to derive them)"
)
"""An artifact without references other than v1's: what its GEMM model learned from is not known."""


def legacy(artifact_sha256: str) -> GemmReferences:
    """The references of an artifact that stores none: v1's for v1's artifact, none for any other."""
    return V1 if artifact_sha256 == V1_ARTIFACT_SHA256 else NOT_RECORDED


def same_envelope(a: hardware.Hardware, b: hardware.Hardware) -> bool:
    """Whether two parts are the same silicon at the same clock and board power."""
    return (a.sm_major, a.sm_minor, a.sm_count, a.boost_clock_mhz, a.tdp_w) == (
        b.sm_major,
        b.sm_minor,
        b.sm_count,
        b.boost_clock_mhz,
        b.tdp_w,
    )


def reference_of(name: str, references: tuple[Reference, ...]) -> Reference | None:
    """The reference among `references` whose envelope the catalog part `name` shares, None when none does."""
    part = hardware.get(name)
    return next((r for r in references if r.same_envelope(part)), None)


def time_factor(
    dtype: pd.Series, hw: HardwareArrays, flops: np.ndarray, moved: np.ndarray, references: tuple[Reference, ...]
) -> np.ndarray:
    """Per GEMM call, the factor its learned time is multiplied by: `1 - s + s / ratio` on a tensor-core call in a
    reference dtype (`REFERENCE_DTYPES`: fp8 was not measured in them) of at least `MIN_FLOPS` on a part with one of
    `references` (`s` the compute share of its roofline), 1 under `MIN_FLOPS / 10`: the reference rows are all >=
    `MIN_FLOPS`, and a smaller GEMM's time is mostly its launch (a 512^3 bf16 one on an A100 is 7.4 us), which they
    say nothing of. In the decade between, the ratio is taken to the power of the call's place in it (log10 of FLOPs),
    so the price has no step: a GEMM a little larger never prices faster than a smaller one of the same shape family."""
    factor = np.ones(len(flops))
    if not references:
        return factor
    tensor = (
        (hw.peak_flops > hw.fp32_peak_flops)
        & dtype.isin(REFERENCE_DTYPES).to_numpy()
        & (np.asarray(flops) > MIN_FLOPS / 10)
    )
    weight = np.clip(np.log10(np.maximum(np.asarray(flops, dtype="float64"), 1.0) / MIN_FLOPS) + 1.0, 0.0, 1.0)
    codes, names = pd.factorize(pd.Series(hw.name))
    for code, name in enumerate(names):
        ref = reference_of(str(name), references)
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


def public_gemm_rows() -> pd.DataFrame:
    """The shipped public GEMM measurements (`data/kernels_public/`) as measured calls with `measured_ns`, `source`
    (kp:<source_id>), `impl` (the row's `kernel_impl`) and `row_id`, hardware as catalog names."""
    from .kernels_public_data import kernels_public_dir

    return _public_gemm_rows(kernels_public_dir()).copy()


@lru_cache(maxsize=2)
def _public_gemm_rows(directory: Path) -> pd.DataFrame:
    """`public_gemm_rows` of the files under `directory` (read once per process: every training derives from them)."""
    from .kernels_public_data import FILES, load, measured_calls

    rows = pd.concat([load(directory / f).rows for f in FILES], ignore_index=True)
    public = rows[rows["direction"] == "gemm"].reset_index(drop=True)
    calls, _ = measured_calls(public)
    at = calls["measurement"].to_numpy()
    calls = calls.assign(
        measured_ns=public["time_s"].to_numpy()[at] * 1e9,
        source="kp:" + public["source_id"].to_numpy()[at],
        impl=public["kernel_impl"].to_numpy()[at],
        row_id=public["row_id"].to_numpy()[at],
    )
    calls["hardware"] = catalog_names(calls["hardware"].astype(str))
    return calls


def learned_from(measurements: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """Per part (catalog name), the sources (`source` column, else `UNNAMED_SOURCE`) of the tensor-core GEMMs among
    normalised measured calls."""
    gemms = measurements[measurements["family"] == "gemm"]
    if gemms.empty:
        return {}
    tensor = gemms[segments("gemm", gemms, hardware_arrays(gemms)) == "tensor"]
    source = tensor["source"].astype(str) if "source" in tensor else pd.Series(UNNAMED_SOURCE, index=tensor.index)
    return {
        str(part): tuple(sorted(set(group)))
        for part, group in source.groupby(tensor["hardware"].astype(str), observed=True)
    }


def _candidate_rows(sources: dict[str, tuple[str, ...]]) -> pd.DataFrame | None:
    """The public reference rows on the envelopes of the parts whose tensor-core GEMMs were learned from
    `HARNESS_SOURCE` (`learned_from`'s `sources`), or None when there are no such parts."""
    harnessed = [hardware.get(part) for part, names in sources.items() if HARNESS_SOURCE in names]
    if not harnessed:
        return None
    rows = reference_rows(public_gemm_rows())
    return rows[[any(same_envelope(hardware.get(p), h) for h in harnessed) for p in rows["hardware"]]]


def inputs_digest(measurements: pd.DataFrame) -> str:
    """SHA-256 of what `derive` reads besides the estimator: the tensor-core GEMMs' sources per part and the
    public reference rows it may use (ids and measured times), which a version's data hash does not see."""
    sources = learned_from(measurements)
    rows = _candidate_rows(sources)
    used = [] if rows is None else sorted(zip(rows["row_id"].astype(str), rows["measured_ns"].astype(float)))
    return hashlib.sha256(json.dumps({"learned_from": sources, "rows": used}, sort_keys=True).encode()).hexdigest()


def derive(estimator: KernelEstimator, measurements: pd.DataFrame) -> GemmReferences:
    """The references of `estimator`, trained on `measurements` (normalised measured calls, with their `source`): per
    public reference part with a part of its envelope whose tensor-core GEMMs were learned from Vidur's rows, the
    median of the estimator's learned time (without references) over the measured time of its reference rows priced
    from measurements; none for the other parts."""
    sources = learned_from(measurements)
    rows = _candidate_rows(sources)
    if rows is None:
        learned = ", ".join(sorted({s for names in sources.values() for s in names})) or "no tensor-core GEMMs"
        return GemmReferences(
            learned_from=sources, note=f"none: the tensor-core GEMMs were learned from {learned}, not {HARNESS_SOURCE}"
        )
    priced = uncalibrated(estimator).predict(rows[["hardware", "family", "op", "dtype", "batch", "m", "n", "k"]])
    ratio = priced["duration_ns"].to_numpy() / rows["measured_ns"].to_numpy()
    measured = priced["method"].isin(PRICED_METHODS).to_numpy()
    references = tuple(
        Reference(
            str(part),
            float(np.median(ratio[at])),
            tuple(rows["row_id"].to_numpy()[at]),
            tuple(sorted({s.removeprefix("kp:") for s in rows["source"].to_numpy()[at]})),
        )
        for part in sorted(set(rows["hardware"][measured]))
        for at in [measured & (rows["hardware"] == part).to_numpy()]
    )
    if not references:
        return GemmReferences(
            learned_from=sources, note=f"none: no public cuBLAS reference rows on the parts {HARNESS_SOURCE} measured"
        )
    note = (
        f"derived when the version was trained, on the parts whose tensor-core GEMMs it learned from {HARNESS_SOURCE}"
    )
    return GemmReferences(references, sources, note)


def uncalibrated(estimator: KernelEstimator) -> KernelEstimator:
    """The estimator with its learned GEMM price alone (no references): it prices differently, so it is no longer
    the registered artifact's (`artifact_sha256` cleared: its attention fit is not the stored one's)."""
    return replace(estimator, gemm_references=NONE, artifact_sha256=None)
