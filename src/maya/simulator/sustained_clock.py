"""The clock a training step's tensor-core work sustains under the board's power cap (Hopper).

Maya's Hopper kernel measurements (Vidur's H100 SXM) are short-loop timings: the GPU runs a kernel a few
hundred times and is timed before its power controller settles, so the learned models price the *burst* clock.
A training step that keeps the tensor cores busy draws more than the board may (700 W on the H100 SXM) and the
controller lowers the SM clock until the power meets the cap: the *sustained* clock. The handed figures
(`kernels_public/sustained_gemm`): an H100 SXM sustains ~730 TFLOP/s bf16 in back-to-back 8192^3 GEMMs for
>= 60 s (gpu-fryer 1.1.0, cuBLASLt) against 794.5 in short loops (MAMF finder, best shape): 0.92.

The model: dynamic power ~ f V^2 with the voltage rising with the clock above a knee, i.e. P ~ f^a, and the
tensor cores' power proportional to the FLOPs they complete (the same energy per FLOP at a given clock). A mix
running at R TFLOP/s at the burst clock demands

    P(R) = P_ref * (R / R_ref) * (f_boost / f_boost_ref) ** (a - 1),

where `P_ref` is what the reference part's burst rate `R_ref` would draw, `P_ref = cap_ref * (R_ref /
R_sustained_ref) ** a` (its sustained rate is where that power meets its cap), and the last factor carries
the energy per FLOP ~ f^(a-1) to a part of another boost clock. The clock falls until the power meets the part's
cap: `f / f_burst = min(1, (cap / P(R)) ** (1 / a))`. Constants (`EXPONENT`, `REFERENCES`), each from the handed
figures and the catalog:

- `a` (`EXPONENT` = 2.52): the A100 pair measured by the same program, same shape, same library (gpu-fryer
  1.1.0, cuBLASLt, 8192^3 bf16): the PCIe 40GB at its 250 W cap sustains 224 TFLOP/s, the SXM4 80GB at its
  400 W cap 270 (same die, SM count and 1410 MHz boost: a compute-bound GEMM's rate is its clock), so
  a = ln(400 / 250) / ln(270 / 224). It assumes the SXM's 400 W binds at 270 (its burst, 271.2, is no faster);
  if it does not, a is smaller: 2.52 is the data's upper bound, inside the physical range (1 at constant
  voltage, 3 with voltage proportional to the clock).
- Hopper (`REFERENCES[9]`): the H100 SXM's 700 W (catalog `tdp_w`), 1980 MHz (`boost_clock_mhz`), 794.5
  TFLOP/s burst (MAMF finder, torch 2.7, mean of 100 calls) and ~730 sustained (gpu-fryer 1.1.0): its bf16
  GEMMs would draw 866 W at the burst clock. Checks, not fitted: the GH200's 705 vs 828.6 then leaves ~300 W
  of its 900 W module to the Grace CPU and its memory; an H100 PCIe (350 W, 1755 MHz) whose GEMMs burst at
  the SXM's share of peak (0.80 x 756.5) comes out at ~505 TFLOP/s sustained, against a community maximum
  of 495.9.
- Ampere and older: no burst/sustained gap was measured (A100 SXM 270 vs 271.2), and an A100's short loops are
  already power-limited (Horace He: 257 TFLOP/s with randn inputs, 295 with zeros), so their kernel
  measurements carry the cap: no reference, nothing changes.

Which kernels: the compute-bound tensor-core kernels (GEMMs and fused attention in a dtype whose peak exceeds
the FP32 one, with more FLOPs than their bytes allow at the roofline's ridge) draw the power and slow with the
clock. Memory-bound kernels (elementwise, normalisation, copies, memory-bound GEMMs) keep their time: the cap
lowers the SM clock, not the HBM clock their time is set by. FP32 GEMMs on the CUDA cores draw 580-650 W on an
H100 SXM (gpu-fryer issue #4): under the cap. The mix rate R is the step's tensor-core FLOPs over their burst
device time, so a step of GEMMs that run far below peak draws less and slows less.

Beside a collective: a collective draws power too (its NVLink, network and HBM traffic, its SMs) from the same
cap. The one public observation (DeepGEMM issue #120, `kernels_public/sustained_gemm` row `deepgemm_issue120`)
saw a Hopper GPU at its cap run at 1,575 of 1,980 MHz while computation overlapped communication
(`OVERLAP_CLOCK`). Assuming that run's compute was a compute-bound GEMM mix at the reference's burst rate (its
demand `REFERENCES[9].burst_power_w`, ~866 W), the collective added `dP = cap - P_ref * r_o^a` (~214 W of
700 W), taken as that share of a part's cap (`collective_power_share`). A step whose mix demands `D` at the burst
clock then runs beside a collective at the `r` solving `D r^a + dP = cap` (`overlap_ratio`; at most 1): a mix
well under the cap keeps its clock.

When: in the steady state. A step whose tensor-core work runs for less than `SUSTAINED_AFTER_S` is a burst,
as MAMF's timing loops are (<= 150 calls of <= 1 ms per shape, interleaved with L2 flushes): its clock is kept.
Training repeats its steps back to back, so a step past that length runs in the sustained regime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from maya.core.hardware import Hardware

from .iterations import Iterations
from .opcodes import COLL, DEVICE_OPS
from .program import Program

EXPONENT = math.log(400 / 250) / math.log(270 / 224)
"""a in P ~ f^a: A100 PCIe 40GB (250 W) and A100 SXM4 80GB (400 W) sustained bf16 GEMM rates, gpu-fryer 1.1.0."""
SUSTAINED_AFTER_S = 0.15
"""Tensor-core seconds a step must run to reach the steady state: MAMF's per-shape timing loop (150 calls of at
most 1 ms) is the longest stretch the burst figures time at the burst clock."""
POWER_FAMILIES = ("gemm", "attention")
"""Families that run on the tensor cores (when their dtype does)."""


@dataclass(frozen=True)
class Reference:
    """One architecture's measured burst and sustained dense GEMM rates on a reference part at its cap."""

    part: str
    cap_w: float
    boost_mhz: float
    burst_tflops: float
    sustained_tflops: float
    source: str

    @property
    def burst_power_w(self) -> float:
        """What the reference's burst rate would draw at the burst clock: the sustained rate meets the cap."""
        return self.cap_w * (self.burst_tflops / self.sustained_tflops) ** EXPONENT


REFERENCES: dict[int, Reference] = {
    9: Reference(
        part="h100-sxm",
        cap_w=700.0,
        boost_mhz=1980.0,
        burst_tflops=794.5,
        sustained_tflops=730.0,
        source="MAMF finder (stas00/ml-engineering, torch 2.7) vs gpu-fryer 1.1.0 (cuBLASLt, >= 60 s), bf16",
    )
}
"""Per compute capability major: the reference pair. Architectures without one keep their kernels' times."""


OVERLAP_CLOCK = {9: 1575 / 1980}
"""Per compute capability major: SM clock over the burst clock while compute overlapped a collective at the power
cap (DeepGEMM issue #120, `kernels_public/sustained_gemm`, row `deepgemm_issue120`: 1,980 -> 1,575 MHz)."""


@dataclass(frozen=True)
class SustainedClock:
    """The clock a mix of tensor-core work sustains on one part: the demand at the burst clock and the ratio."""

    demand_w: float
    cap_w: float
    ratio: float
    """Sustained / burst clock (1: the cap does not bind)."""


def sustained_clock(hardware: Hardware, burst_tflops: float) -> SustainedClock | None:
    """The sustained clock of tensor-core work running at `burst_tflops` on `hardware` at its burst clock; None
    where its architecture has no measured burst/sustained reference (its measurements carry its cap)."""
    ref = REFERENCES.get(hardware.sm_major)
    if ref is None:
        return None
    if not (burst_tflops > 0 and math.isfinite(burst_tflops)):
        raise ValueError(f"burst rate must be a positive number of TFLOP/s, not {burst_tflops!r}")
    demand = (
        ref.burst_power_w
        * (burst_tflops / ref.burst_tflops)
        * (hardware.boost_clock_mhz / ref.boost_mhz) ** (EXPONENT - 1)
    )
    return SustainedClock(demand, hardware.tdp_w, min(1.0, (hardware.tdp_w / demand) ** (1 / EXPONENT)))


def collective_power_share(hardware: Hardware) -> float | None:
    """The share of the power cap a collective draws beside compute on `hardware`'s architecture: the overlap
    observation's cap less what its compute (assumed the reference's compute-bound burst mix) drew at the
    observed clock; None without a reference or an overlap observation."""
    ref, observed = REFERENCES.get(hardware.sm_major), OVERLAP_CLOCK.get(hardware.sm_major)
    if ref is None or observed is None:
        return None
    return 1.0 - ref.burst_power_w / ref.cap_w * observed**EXPONENT


def overlap_ratio(clock: SustainedClock, hardware: Hardware) -> float | None:
    """The clock (over the burst clock) of a mix of sustained clock `clock` while a collective runs beside it: the
    `r` solving `demand r^a + dP = cap`, at most the mix's own sustained ratio; None where the architecture has no
    overlap observation (the sustained ratio stands)."""
    share = collective_power_share(hardware)
    if share is None:
        return None
    left = clock.cap_w * (1.0 - share)
    return min(clock.ratio, (left / clock.demand_w) ** (1 / EXPONENT))


def power_rows(frame: pd.DataFrame, hardware: Hardware) -> np.ndarray:
    """Rows of a priced frame that draw the power: compute-bound tensor-core kernels (`POWER_FAMILIES` in a dtype
    whose peak exceeds the FP32 one, FLOPs over peak at least bytes over HBM bandwidth, or bytes unknown)."""
    ops = frame["opcode"].to_numpy()
    rows = np.isin(ops, DEVICE_OPS) & (ops != COLL) & frame["family"].isin(POWER_FAMILIES).to_numpy()
    codes, dtypes = pd.factorize(frame["dtype"].fillna("fp32").astype(str))
    fp32 = hardware.peak_flops("fp32")
    peak = np.array([hardware.peak_flops(d) for d in dtypes] + [fp32], dtype="float64")[codes]
    flops = frame["flops"].to_numpy(dtype="float64", na_value=np.nan)
    moved = frame["work_bytes"].to_numpy(dtype="float64", na_value=np.nan)
    compute_bound = ~(flops / peak < moved / hardware.memory_bandwidth)  # NaN (unknown) counts as compute-bound
    return rows & (peak > fp32) & compute_bound & (np.nan_to_num(flops) > 0)


@dataclass(frozen=True)
class Derate:
    """What the sustained clock did to one program's kernels."""

    clock: SustainedClock
    rows: np.ndarray
    step_tensor_s: float
    burst_tflops: float


def derate(program: Program, device: np.ndarray, iterations: Iterations, hardware: Hardware) -> Derate | None:
    """The sustained clock of a program's steady steps (None: its architecture has no reference, it runs no
    tensor-core work, or its steps are bursts shorter than `SUSTAINED_AFTER_S`)."""
    if REFERENCES.get(hardware.sm_major) is None or program.frame is None:
        return None
    rows = power_rows(program.frame, hardware)
    if not rows.any():
        return None
    busy = np.where(rows, device, 0.0)
    per_step = [busy[iterations.bounds[k] : iterations.bounds[k + 1]].sum() for k in iterations.steady]
    step_s = float(np.mean(per_step)) * 1e-9 if per_step else 0.0
    if step_s < SUSTAINED_AFTER_S:
        return None
    flops = program.frame["flops"].to_numpy(dtype="float64", na_value=np.nan)[rows]
    burst_tflops = float(np.nansum(flops) / (busy.sum() * 1e-9) / 1e12)
    clock = sustained_clock(hardware, burst_tflops)
    return Derate(clock, rows, step_s, burst_tflops)


def apply(
    programs: dict[int, Program],
    replicas: list,
    devices: list[np.ndarray],
    iterations: dict[int, Iterations],
    hardware: Hardware,
) -> tuple[list[np.ndarray], list[str], dict[int, SustainedClock]]:
    """Each replica's device times with its program's compute-bound tensor-core kernels at the sustained clock,
    a note on the clock used (nothing when no program reaches the steady state or the cap does not bind), and
    the sustained clock of each program (by rank) in the steady state (its ratio 1: the cap does not bind;
    programs in bursts or on parts without a reference are absent)."""
    by_array: dict[int, np.ndarray] = {}
    applied: list[Derate] = []
    found: dict[int, Derate | None] = {}
    out = []
    for replica, device in zip(replicas, devices):
        rank = replica.program.rank
        if rank not in found:
            found[rank] = derate(replica.program, device, iterations[rank], hardware)
            if found[rank] is not None and found[rank].clock.ratio < 1:
                applied.append(found[rank])
        d = found[rank]
        if d is None or d.clock.ratio >= 1:
            out.append(device)
            continue
        if id(device) not in by_array:
            by_array[id(device)] = np.where(d.rows, np.rint(device / d.clock.ratio), device).astype(device.dtype)
        out.append(by_array[id(device)])
    clocks = {rank: d.clock for rank, d in found.items() if d is not None}
    return out, _notes(applied, hardware), clocks


def _notes(applied: list[Derate], hardware: Hardware) -> list[str]:
    if not applied:
        return []
    worst = min(applied, key=lambda d: d.clock.ratio)
    c = worst.clock
    return [
        f"sustained clock: {hardware.name}'s tensor-core kernels run at {c.ratio:.3f} x their burst speed "
        f"(~{c.ratio * hardware.boost_clock_mhz:,.0f} of {hardware.boost_clock_mhz:,} MHz): at the burst clock "
        f"their mix ({worst.burst_tflops:,.0f} TFLOP/s, {worst.step_tensor_s:.2f} s a step) would draw "
        f"~{c.demand_w:,.0f} W against the {c.cap_w:,.0f} W power cap, and the kernel measurements are "
        "short-loop (burst) timings; memory-bound kernels keep their time (the cap lowers the SM clock, not "
        "HBM's). Off: --no-sustained-clock (PredictOptions.sustained_clock=False)"
    ]
