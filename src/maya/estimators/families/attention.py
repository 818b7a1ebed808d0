"""Fused attention (FlashAttention-2, torch's flash kernels, cuDNN SDPA), forward and backward.

No attention kernel was ever measured here, so a call's time is composed from mechanisms (`compose`)
rather than learned, unless a learned attention model exists:

- **tensor cores**: the fused kernel's matrix products, priced as the GEMMs they are — QK^T and
  dO V^T as `batch` products of [m, d] x [d, n], PV, dV = P^T dO, dK = dS^T Q and dQ = dS K as
  products with the key (or query) length as reduction — by the GEMM family's own predictor, with the
  fused kernel's HBM traffic (only Q, K, V, O and their gradients: the scores stay on chip) so the
  GEMM model judges tensor-core efficiency at small k, tiles and waves, not the traffic of a score
  matrix that is never written. Forward: two products; backward: five (the scores recomputed, dP, dV,
  dK, dQ).
- **special-function unit**: one `exp2` per score element (forward; the backward recomputes P), at
  `SFU_OPS_PER_CLOCK` results per clock per SM (the CUDA C++ Programming Guide's throughput table of
  native arithmetic instructions: 32-bit reciprocal, rsqrt, log2, exp2, sine, cosine) x SMs x the
  spec sheet's boost clock.
- **softmax bookkeeping** on the FP32 pipes (`FORWARD_FP32_OPS`, `BACKWARD_FP32_OPS` per score
  element, counted from FlashAttention-2's algorithms 1 and 2), at the spec sheet's FP32 rate (FMA
  counted as one instruction: half the FP32 FLOP/s).
- **causal masking**: only tiles on or below the diagonal are computed (`causal_tile_share`, tiles of
  `TILE` queries x `TILE` keys, the mask aligned to the top left as `is_causal` is).
- **memory**: Q, K, V, O (and dO, dK, dV, the row statistics and the backward's fp32 dQ accumulator)
  once through HBM, at the HBM bandwidth; the kernels prefetch, so memory overlaps compute. K and V
  re-read by every query tile, and FlashAttention-2's atomic adds into the dQ accumulator once per key
  tile, are taken as L2 hits (no spec sheet gives L2 or atomic throughput: not modelled).
- **overlap by kernel generation**: FlashAttention-2-style kernels (torch's flash kernels,
  flash-attn 2, Triton ports: `flash_*` ops, and cuDNN on sm_80/86/89) issue each warp's
  QK^T -> softmax -> PV in order with synchronous `mma.sync`, so the exponentials and bookkeeping run
  between the products: their times add. Hopper kernels built on asynchronous warpgroup MMA with
  warp specialisation (cuDNN's sm_90 SDPA engines, like CUTLASS's Hopper FMHA and FlashAttention-3)
  run the softmax of one tile while the tensor cores work on another: the longer of the two counts.
- **synchronous MMA on Hopper**: the GEMM family learned cuBLAS's Hopper kernels, which reach the
  tensor-core peak through warpgroup MMA (`wgmma`); FlashAttention-2-style kernels keep Ampere's
  synchronous `mma.sync`, which on sm_90 reaches only `SYNCHRONOUS_MMA_SHARE` of that peak
  (FlashAttention-3 paper, Shah et al. 2024, section 2: "mma.sync can only reach 2/3 of the peak
  throughput of the Hopper Tensor Cores", from Luo et al.'s microbenchmarks of Hopper), so their products
  take 1 / share the time cuBLAS would. Architectures not in the table are not slowed (no public figure).

FlashAttention-2's backward also launches two memory passes (`flash_bwd_preprocess`: D = rowsum(dO * O)
and the zeroed fp32 dQ accumulator; `flash_bwd_postprocess`: dQ converted from fp32), priced as the
elementwise family prices such a pass.

Call frame: `batch` = batch x heads, `m` query length, `n` key length, `k` head dimension; op
`<kernel>_<fwd|bwd>[_causal]` with kernel `sdpa` (cuDNN) or `flash`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..calls import element_bytes, gemm_of_row_major
from .base import Composed, FamilyPredictor, PriceCalls, Work, count_or_one, log2
from ..hardware_table import HardwareArrays

QUERY_TILE = 128
"""Query rows per thread block in flash-attention kernels."""
TILE = 128
"""Queries and keys per tile for the causal mask's share of computed tiles (FlashAttention-2's kBlockM is 128
for training head dimensions; its kBlockN is 64-128: the share differs by under 1% at 2k tokens)."""
BACKWARD_PRODUCTS, FORWARD_PRODUCTS = 5, 2
BACKWARD_FLOPS = BACKWARD_PRODUCTS / FORWARD_PRODUCTS
"""Backward / forward FLOPs (dQ, dK, dV, dP and the recomputed scores)."""
FORWARD_FP32_OPS = 3.5
"""FP32-pipe instructions per score element in the forward beyond the exponential: the row maximum, the
fused scale-and-subtract feeding exp2, the row sum, and half a conversion to 16 bits (P is packed in pairs
for the PV product). The rescaling of the output accumulator adds `k / TILE` (d multiplies per query row and
key tile)."""
BACKWARD_FP32_OPS = 4.0
"""Per score element in the backward beyond the exponential: the scale-and-subtract recomputing P,
dS = P * (dP - D) (a subtract and a multiply), and the 16-bit conversions of P and dS (half each)."""
EXP_PER_ELEMENT = 1.0
"""One exp2 per score element, forward and backward (P is recomputed, not stored)."""
SFU_OPS_PER_CLOCK: dict[int, float] = {50: 32, 52: 32, 53: 32, 60: 16, 61: 32, 62: 32, 70: 16, 72: 16, 75: 16,
                                       80: 16, 86: 16, 87: 16, 89: 16, 90: 16}
"""Results per clock per SM of exp2 (MUFU.EX2) by compute capability (major * 10 + minor), from the CUDA C++
Programming Guide's table of native arithmetic instruction throughput. Newer architectures: 16."""
DEFAULT_SFU_OPS_PER_CLOCK = 16.0
WARP_SPECIALISED_MIN_ARCHITECTURE = 90
"""cuDNN's SDPA engines from sm_90 on use asynchronous warpgroup MMA with warp specialisation."""
SYNCHRONOUS_MMA_SHARE: dict[int, float] = {90: 2 / 3}
"""Share of the tensor-core peak synchronous `mma.sync` reaches, by compute capability, where the peak needs
warpgroup MMA (FlashAttention-3 paper, section 2, citing Luo et al.'s Hopper microbenchmarks)."""
LSE_BYTES = 4
"""fp32 per query row: the log-sum-exp the forward saves (and the backward's D = rowsum(dO * O))."""
ACCUMULATOR_BYTES = 4
"""The backward's dQ accumulator is fp32."""


class AttentionPredictor(FamilyPredictor):
    family = "attention"
    composed_from = "gemm"
    ops = ("sdpa_fwd", "sdpa_bwd", "sdpa_fwd_causal", "sdpa_bwd_causal", "flash_fwd", "flash_bwd",
           "flash_fwd_causal", "flash_bwd_causal", "flash_bwd_preprocess", "flash_bwd_postprocess")

    def count(self, calls: pd.DataFrame, itemsize: np.ndarray, hw: HardwareArrays) -> Work:
        b, m, n, d = _shape(calls)
        op = _ops(calls)
        backward = np.char.find(op, "bwd") >= 0
        share = np.where(_causal(op), causal_tile_share(m, n), 1.0)
        flops = 4 * b * m * n * d * np.where(backward, BACKWARD_FLOPS, 1.0) * share
        return Work(flops=np.where(_pass(op), 0.0, flops), bytes=_traffic(op, b, m, n, d, itemsize))

    def shape_features(self, calls: pd.DataFrame, hw: HardwareArrays) -> dict[str, np.ndarray]:
        b, m, n, d = _shape(calls)
        waves = b * np.ceil(m / QUERY_TILE) / hw.sm_count
        return {"log2_batch": log2(b), "log2_query": log2(m), "log2_key": log2(n), "log2_head_dim": log2(d),
                "log2_waves": log2(waves), "wave_fill": waves / np.ceil(waves),
                "causal": _causal(_ops(calls)).astype("float64")}

    def compose(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> Composed:
        b, m, n, d = _shape(calls)
        op = _ops(calls)
        itemsize = element_bytes(calls["dtype"])
        hardware = np.asarray(hw.name, dtype=object)
        dtype = calls["dtype"].astype(str).to_numpy()
        backward = np.char.find(op, "bwd") >= 0
        passes = _pass(op)
        share = np.where(_causal(op), causal_tile_share(m, n), 1.0)
        memory_s = _traffic(op, b, m, n, d, itemsize) / hw.bandwidth
        tensor = _tensor_core_seconds(price, hardware, dtype, b, m, n, d, itemsize, backward, ~passes)
        elements = b * m * n * share
        sfu_rate = hw.sm_count * sfu_ops_per_clock(hw.architecture) * hw.boost_clock_hz
        fp32_ops = np.where(backward, BACKWARD_FP32_OPS, FORWARD_FP32_OPS + d / TILE)
        softmax_s = elements * (EXP_PER_ELEMENT / sfu_rate + fp32_ops / (hw.fp32_flops / 2))
        overlapped = (np.char.startswith(op, "sdpa") & (hw.architecture >= WARP_SPECIALISED_MIN_ARCHITECTURE))
        mma_share = np.where(overlapped, 1.0, synchronous_mma_share(hw.architecture))

        def total(tensor_s: np.ndarray) -> np.ndarray:
            tensor_s = tensor_s * share / mma_share
            compute = np.where(overlapped, np.maximum(tensor_s, softmax_s), tensor_s + softmax_s)
            return np.maximum(compute, memory_s)

        fused = [total(t) for t in tensor]
        memory_pass = _memory_pass_seconds(price, hardware, dtype, op, b, m, d, itemsize, passes)
        return Composed(*(np.where(passes, p, f) for f, p in zip(fused, memory_pass)))


def causal_tile_share(m: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Share of the (m / TILE) x (n / TILE) tiles a causal mask aligned to the top left leaves to compute:
    query tile i needs key tiles 0..i."""
    q_tiles, k_tiles = np.ceil(np.asarray(m, "float64") / TILE), np.ceil(np.asarray(n, "float64") / TILE)
    square = np.minimum(q_tiles, k_tiles)
    kept = square * (square + 1) / 2 + np.maximum(q_tiles - k_tiles, 0) * k_tiles
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q_tiles * k_tiles > 0, kept / (q_tiles * k_tiles), 1.0)


def sfu_ops_per_clock(architecture: np.ndarray) -> np.ndarray:
    return np.array([SFU_OPS_PER_CLOCK.get(int(a), DEFAULT_SFU_OPS_PER_CLOCK) for a in architecture], dtype="float64")


def synchronous_mma_share(architecture: np.ndarray) -> np.ndarray:
    return np.array([SYNCHRONOUS_MMA_SHARE.get(int(a), 1.0) for a in architecture], dtype="float64")


def _shape(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return count_or_one(calls["batch"]), calls["m"].to_numpy(), calls["n"].to_numpy(), calls["k"].to_numpy()


def _ops(calls: pd.DataFrame) -> np.ndarray:
    return calls["op"].astype(str).to_numpy().astype(str)


def _causal(op: np.ndarray) -> np.ndarray:
    return np.char.endswith(op, "_causal")


def _pass(op: np.ndarray) -> np.ndarray:
    """FlashAttention-2's backward memory passes (no product of their own)."""
    return np.char.endswith(op, "process")


def _traffic(op: np.ndarray, b: np.ndarray, m: np.ndarray, n: np.ndarray, d: np.ndarray,
             itemsize: np.ndarray) -> np.ndarray:
    """HBM bytes per call. Forward: Q, K, V in, O and the log-sum-exp out. Backward: Q, K, V, dO and the row
    statistics in, dK and dV out, the fp32 dQ accumulator written back (its per-tile atomic adds hit L2).
    Preprocess: dO and O in, D out, the accumulator zeroed; postprocess: the accumulator in, dQ out."""
    q, kv = itemsize * b * m * d, itemsize * b * n * d
    rows = LSE_BYTES * b * m
    accumulator = ACCUMULATOR_BYTES * b * m * d
    forward = 2 * q + 2 * kv + rows
    backward = 2 * q + 4 * kv + 2 * rows + accumulator
    preprocess, postprocess = 2 * q + rows + accumulator, accumulator + q
    is_backward = np.char.find(op, "bwd") >= 0
    return np.select([np.char.endswith(op, "preprocess"), np.char.endswith(op, "postprocess"), is_backward],
                     [preprocess, postprocess, backward], forward)


def _tensor_core_seconds(price: PriceCalls, hardware: np.ndarray, dtype: np.ndarray, b: np.ndarray, m: np.ndarray,
                         n: np.ndarray, d: np.ndarray, itemsize: np.ndarray, backward: np.ndarray,
                         fused: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call, the GEMM family's time (and its band) for the kernel's products, unmasked: forward QK^T and
    PV; backward also dP = dO V^T, dV = P^T dO, dK = dS^T Q and dQ = dS K."""
    rows = np.flatnonzero(fused)
    out = tuple(np.zeros(len(b)) for _ in range(3))
    if not len(rows):
        return out
    # row-major (rows, columns, reduction) of each product in units of (queries, keys, head dim), priced in the
    # call frame's cuBLAS convention (`calls.gemm_of_row_major`); forward uses the first two
    products = (("q", "k", "d"), ("q", "d", "k"), ("q", "k", "d"), ("k", "d", "q"), ("k", "d", "q"))
    frames, owners = [], []
    for j, dims in enumerate(products):
        chosen = rows if j < FORWARD_PRODUCTS else rows[backward[rows]]
        size = {"q": m[chosen], "k": n[chosen], "d": d[chosen]}
        batch, gm, gn, gk = gemm_of_row_major(b[chosen], *(size[dim] for dim in dims))
        frames.append(pd.DataFrame({
            "hardware": hardware[chosen], "family": "gemm", "op": "bmm", "dtype": dtype[chosen], "batch": batch,
            "m": gm, "n": gn, "k": gk,
            # the fused kernel's HBM traffic: the two [length x d] operands; the scores never leave the SM
            "bytes": itemsize[chosen] * b[chosen] * (m[chosen] + n[chosen]) * d[chosen]}))
        owners.append(chosen)
    priced = price(pd.concat(frames, ignore_index=True))
    owner = np.concatenate(owners)
    for total, column in zip(out, ("duration_ns", "duration_low_ns", "duration_high_ns")):
        np.add.at(total, owner, priced[column].to_numpy(dtype="float64") * 1e-9)
    return out


def _memory_pass_seconds(price: PriceCalls, hardware: np.ndarray, dtype: np.ndarray, op: np.ndarray,
                         b: np.ndarray, m: np.ndarray, d: np.ndarray, itemsize: np.ndarray,
                         passes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The backward's memory passes as the elementwise family prices a pass over [batch x m x d] with their
    traffic."""
    rows = np.flatnonzero(passes)
    out = tuple(np.zeros(len(b)) for _ in range(3))
    if not len(rows):
        return out
    traffic = _traffic(op[rows], b[rows], m[rows], m[rows], d[rows], itemsize[rows])
    frame = pd.DataFrame({"hardware": hardware[rows], "family": "elementwise", "op": "mul", "dtype": dtype[rows],
                          "numel": b[rows] * m[rows] * d[rows], "row": d[rows], "operands": 2.0, "bytes": traffic})
    priced = price(frame)
    for total, column in zip(out, ("duration_ns", "duration_low_ns", "duration_high_ns")):
        total[rows] = priced[column].to_numpy(dtype="float64") * 1e-9
    return out
