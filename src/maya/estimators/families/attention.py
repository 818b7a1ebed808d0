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
- **shared-memory operands** (`flash_*` ops, `flash_smem_ratio`): `mma.sync` takes its operands from
  registers, which FlashAttention-2 fills from shared memory with `ldmatrix` before every product, each
  warp loading the rows and columns of its own warp tile. With FlashAttention-2's tiles and warp layouts
  (`FLASH_FORWARD_TILES`, `FLASH_BACKWARD_TILES`, its launch templates for A100/H100-class shared memory)
  the backward's small warp tiles (32 x 32 for S, dP, dQ) read 16 B of shared memory per 16 FLOPs, at the
  documented 128 B per clock per SM (32 banks of 32 bits: CUDA C++ Programming Guide, shared memory of
  compute capability 5.x and later). Where those reads take longer than the products at the tensor-core
  peak (`TENSOR_FLOPS_PER_CLOCK`), the products run at the shared-memory rate instead: their time is the
  GEMM family's times the larger of 1 / `SYNCHRONOUS_MMA_SHARE` and that ratio (head dim 128: H100 backward
  2.0 instead of 1.5; A100 forward and backward and H100 forward unchanged).

FlashAttention-2's backward also launches two memory passes (`flash_bwd_preprocess`: D = rowsum(dO * O)
and the zeroed fp32 dQ accumulator; `flash_bwd_postprocess`: dQ converted from fp32), and its split-KV forward
one (`flash_fwd_combine`: the `n` splits' fp32 partial outputs and log-sum-exps merged into O), each priced as the
elementwise family prices such a pass.

Call frame: `batch` = batch x heads, `m` query length, `n` key length, `k` head dimension; op
`<kernel>_<fwd|bwd>[_causal]` with kernel `sdpa` (cuDNN), `flash` (the flash-attn package), `torchflash` (torch's
port of it), `efficient` (CUTLASS), `flex` (Triton templates), `lftriton` (llm-foundry's Triton flash attention:
`simulator.attention_shapes`) or `flash1`
(FlashAttention v1's CUDA kernels, which only the public measurements name).

Kernels measured in public (FlashAttention-2, the CUTLASS kernels, FlexAttention, and FlashAttention v1 as the
proxy of llm-foundry's Triton kernel) are priced by `compose` as this mechanism times a correction learned on
their measurements (`maya.estimators.attention_model`); cuDNN's, never measured, from their nearest measured
kernel: FlashAttention-3 on Hopper, FlashAttention-2 before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..attention_model import WARP_SPECIALISED_MIN_ARCHITECTURE, learned
from ..calls import element_bytes, gemm_of_row_major
from ..hardware_table import HardwareArrays, hardware_arrays
from .base import Composed, FamilyPredictor, PriceCalls, Work, count_or_one, log2

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
for the PV product; on Ampere the ALU pipe does the packed FP32-to-16-bit conversion, Nsight Compute's
kernel profiling guide, "alu" pipeline: not the CUDA guide's 16-per-clock conversion units). The rescaling
of the output accumulator adds `k / key tile` (d multiplies per query row and key tile: FlashAttention-2's
`kBlockN`, `FLASH_FORWARD_TILES`; `TILE` for other kernels)."""
BACKWARD_FP32_OPS = 4.0
"""Per score element in the backward beyond the exponential: the scale-and-subtract recomputing P,
dS = P * (dP - D) (a subtract and a multiply), and the 16-bit conversions of P and dS (half each)."""
EXP_PER_ELEMENT = 1.0
"""One exp2 per score element, forward and backward (P is recomputed, not stored)."""
SFU_OPS_PER_CLOCK: dict[int, float] = {
    50: 32,
    52: 32,
    53: 32,
    60: 16,
    61: 32,
    62: 32,
    70: 16,
    72: 16,
    75: 16,
    80: 16,
    86: 16,
    87: 16,
    89: 16,
    90: 16,
}
"""Results per clock per SM of exp2 (MUFU.EX2) by compute capability (major * 10 + minor), from the CUDA C++
Programming Guide's table of native arithmetic instruction throughput. Newer architectures: 16."""
DEFAULT_SFU_OPS_PER_CLOCK = 16.0
SYNCHRONOUS_MMA_SHARE: dict[int, float] = {90: 2 / 3}
"""Share of the tensor-core peak synchronous `mma.sync` reaches, by compute capability, where the peak needs
warpgroup MMA (FlashAttention-3 paper, section 2, citing Luo et al.'s Hopper microbenchmarks)."""
SMEM_BYTES_PER_CLOCK = 128.0
"""Shared-memory bandwidth per SM: 32 banks of 32 bits per clock (CUDA C++ Programming Guide, shared memory of
compute capability 5.x, kept by every later architecture)."""
TENSOR_FLOPS_PER_CLOCK: dict[int, float] = {80: 2048.0, 90: 4096.0}
"""Dense 16-bit tensor-core FLOPs per clock per SM: A100 whitepaper (1,024 FP16 FMA per clock per SM), H100
whitepaper (twice A100's per SM, clock for clock). Other architectures: the catalog's peak / (SMs x clock)."""
FLASH_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
"""Head dimensions FlashAttention-2 compiles kernels for; a call runs the smallest that holds its own."""
FLASH_FORWARD_TILES: dict[int, tuple[int, int, int]] = {64: (128, 128, 4), 128: (128, 64, 4)}
"""FlashAttention-2's forward tiles by head dimension (the kernel's template head dimension): queries
(`kBlockM`), keys (`kBlockN`) and warps, the warps splitting the queries (flash_fwd_launch_template.h,
`run_mha_fwd_hdim64/128`, sm80/sm90; torch 2.1's copy is the same)."""
FLASH_BACKWARD_TILES: dict[int, tuple[int, int, int, int, int, int]] = {
    64: (128, 128, 8, 4, 4, 4),
    128: (64, 128, 8, 2, 4, 2),
}
"""FlashAttention-2's backward tiles by head dimension for GPUs with >= 144 KB of shared memory per block
(A100, H100): `kBlockM`, `kBlockN`, warps, and the warps along the rows of S/dP (`AtomLayoutMSdP`), of
dK/dV (`AtomLayoutNdKV`) and of dQ (`AtomLayoutMdQ`) (flash_bwd_launch_template.h, `run_mha_bwd_hdim64/128`).
Other head dimensions' kernels (32, 96, above 128) use other tiles: not modelled (only the synchronous-MMA
share applies)."""
LSE_BYTES = 4
"""fp32 per query row: the log-sum-exp the forward saves (and the backward's D = rowsum(dO * O))."""
ACCUMULATOR_BYTES = 4
"""The backward's dQ accumulator is fp32."""


class AttentionPredictor(FamilyPredictor):
    family = "attention"
    composed_from = "gemm"
    ops = (
        "sdpa_fwd",
        "sdpa_bwd",
        "sdpa_fwd_causal",
        "sdpa_bwd_causal",
        "flash_fwd",
        "flash_bwd",
        "flash_fwd_causal",
        "flash_bwd_causal",
        "flash_bwd_preprocess",
        "flash_bwd_postprocess",
        "flash_fwd_combine",
        "efficient_fwd",
        "efficient_bwd",
        "efficient_fwd_causal",
        "efficient_bwd_causal",
        "flex_fwd",
        "flex_bwd",
        "flash1_fwd",
        "flash1_bwd",
        "flash1_fwd_causal",
        "flash1_bwd_causal",
        "flash1_bwd_preprocess",
        "flash1_bwd_postprocess",
        "lftriton_fwd",
        "lftriton_bwd",
        "lftriton_fwd_causal",
        "lftriton_bwd_causal",
        "lftriton_bwd_preprocess",
        "lftriton_bwd_postprocess",
        "torchflash_fwd",
        "torchflash_bwd",
        "torchflash_fwd_causal",
        "torchflash_bwd_causal",
        "torchflash_bwd_preprocess",
        "torchflash_bwd_postprocess",
        "torchflash_fwd_combine",
    )

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
        return {
            "log2_batch": log2(b),
            "log2_query": log2(m),
            "log2_key": log2(n),
            "log2_head_dim": log2(d),
            "log2_waves": log2(waves),
            "wave_fill": waves / np.ceil(waves),
            "causal": _causal(_ops(calls)).astype("float64"),
        }

    def compose(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> Composed:
        """The mechanism (`mechanism`), corrected for the implementations measured in public by the model learned
        on them (`maya.estimators.attention_model`)."""
        return learned(calls, self.mechanism(calls, hw, price), price, self.priced_by(price))

    def priced_by(self, price: PriceCalls) -> Callable[[pd.DataFrame], Composed]:
        """`mechanism` as a function of a frame of attention calls, their GEMMs and passes priced by `price`."""
        return lambda frame: self.mechanism(frame, hardware_arrays(frame), price)

    def mechanism(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> Composed:
        """The time composed from the mechanisms alone (module docstring): the fallback for kernels never
        measured (cuDNN's), and the prior the learned correction multiplies."""
        return self._parts(calls, hw, price).composed()

    def breakdown(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> pd.DataFrame:
        """Per call, the parts `compose` adds up (seconds; the GEMM family's central estimates): `gemm_s` the
        products as cuBLAS would run them (causal share applied), `slowdown` what the fused kernel's MMA and
        shared memory make of them (`products_s` = gemm_s x slowdown), `exp2_s`, `fp32_s`, `memory_s`."""
        parts = self._parts(calls, hw, price)
        gemm_s = parts.tensor[0] * parts.share
        return pd.DataFrame(
            {
                "gemm_s": gemm_s,
                "slowdown": parts.slowdown,
                "products_s": gemm_s * parts.slowdown,
                "exp2_s": parts.exp2_s,
                "fp32_s": parts.fp32_s,
                "memory_s": parts.memory_s,
                "overlapped": parts.overlapped,
                "seconds": parts.composed().seconds,
            }
        )

    def _parts(self, calls: pd.DataFrame, hw: HardwareArrays, price: PriceCalls) -> _Parts:
        b, m, n, d = _shape(calls)
        op = _ops(calls)
        itemsize = element_bytes(calls["dtype"])
        hardware = np.asarray(hw.name, dtype=object)
        dtype = calls["dtype"].astype(str).to_numpy()
        backward = np.char.find(op, "bwd") >= 0
        passes = _pass(op)
        share = np.where(_causal(op), causal_tile_share(m, n), 1.0)
        elements = b * m * n * share
        sfu_rate = hw.sm_count * sfu_ops_per_clock(hw.architecture) * hw.boost_clock_hz
        flash = np.char.startswith(op, "flash") | np.char.startswith(op, "torchflash")  # the package's or torch's port
        key_tile = np.where(flash, flash_forward_key_tile(d), TILE)
        fp32_ops = np.where(backward, BACKWARD_FP32_OPS, FORWARD_FP32_OPS + d / key_tile)
        overlapped = np.char.startswith(op, "sdpa") & (hw.architecture >= WARP_SPECIALISED_MIN_ARCHITECTURE)
        slowdown = np.where(overlapped, 1.0, 1.0 / synchronous_mma_share(hw.architecture))
        slowdown = np.where(
            flash, np.maximum(slowdown, flash_smem_ratio(d, backward, tensor_flops_per_clock(hw))), slowdown
        )
        return _Parts(
            tensor=_tensor_core_seconds(price, hardware, dtype, b, m, n, d, itemsize, backward, ~passes),
            share=share,
            slowdown=slowdown,
            exp2_s=elements * EXP_PER_ELEMENT / sfu_rate,
            fp32_s=elements * fp32_ops / (hw.fp32_flops / 2),
            memory_s=_traffic(op, b, m, n, d, itemsize) / hw.bandwidth,
            overlapped=overlapped,
            passes=passes,
            memory_pass=_memory_pass_seconds(price, hardware, dtype, op, b, m, n, d, itemsize, passes),
        )


@dataclass(frozen=True)
class _Parts:
    tensor: tuple[np.ndarray, np.ndarray, np.ndarray]
    """The GEMM family's time for the products, unmasked (central, low, high)."""
    share: np.ndarray
    slowdown: np.ndarray
    exp2_s: np.ndarray
    fp32_s: np.ndarray
    memory_s: np.ndarray
    overlapped: np.ndarray
    passes: np.ndarray
    memory_pass: tuple[np.ndarray, np.ndarray, np.ndarray]

    def composed(self) -> Composed:
        """Products (masked share, slowed) then softmax in order, or overlapped; never under the HBM time."""

        def total(tensor_s: np.ndarray) -> np.ndarray:
            tensor_s = tensor_s * self.share * self.slowdown
            softmax_s = self.exp2_s + self.fp32_s
            compute = np.where(self.overlapped, np.maximum(tensor_s, softmax_s), tensor_s + softmax_s)
            return np.maximum(compute, self.memory_s)

        fused = [total(t) for t in self.tensor]
        return Composed(*(np.where(self.passes, p, f) for f, p in zip(fused, self.memory_pass)))


def causal_tile_share(m: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Share of the (m / TILE) x (n / TILE) tiles a causal mask aligned to the top left leaves to compute:
    query tile i needs key tiles 0..i."""
    q_tiles, k_tiles = np.ceil(np.asarray(m, "float64") / TILE), np.ceil(np.asarray(n, "float64") / TILE)
    square = np.minimum(q_tiles, k_tiles)
    kept = square * (square + 1) / 2 + np.maximum(q_tiles - k_tiles, 0) * k_tiles
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q_tiles * k_tiles > 0, kept / (q_tiles * k_tiles), 1.0)


def flash_forward_key_tile(d: np.ndarray) -> np.ndarray:
    """FlashAttention-2's forward key tile (`kBlockN`) for head dimension `d` (`TILE` where its tiles are not
    modelled)."""
    return np.array([FLASH_FORWARD_TILES[t][1] if t else TILE for t in _template_head_dims(d)], dtype="float64")


def flash_smem_ratio(d: np.ndarray, backward: np.ndarray, tensor_per_clock: np.ndarray) -> np.ndarray:
    """Per call, the time FlashAttention-2's shared-memory operand traffic takes over the time its products take
    at the tensor-core peak, for one tile pair of the kernel's tiles (0 where the head dimension's tiles are
    not modelled)."""
    out = np.zeros(len(d))
    for i, (t, bwd) in enumerate(zip(_template_head_dims(d), backward)):
        if t:
            smem_bytes, flops = (flash_backward_tile_traffic if bwd else flash_forward_tile_traffic)(t)
            out[i] = (smem_bytes / SMEM_BYTES_PER_CLOCK) / (flops / tensor_per_clock[i])
    return out


def flash_forward_tile_traffic(d: int) -> tuple[float, float]:
    """Shared-memory bytes (read by `ldmatrix`, written by the tile copies) and FLOPs per forward tile pair.
    Each of the `warps` warps owns `queries / warps` query rows: for S = Q K^T it reads its Q rows and the
    whole K tile, for O += P V (P from its registers) the whole V tile; the K and V tiles are copied in."""
    queries, keys, warps = FLASH_FORWARD_TILES[d]
    reads = 2 * d * (queries + warps * keys) + 2 * warps * keys * d
    writes = 2 * 2 * keys * d
    return float(reads + writes), float(4 * queries * keys * d)


def flash_backward_tile_traffic(d: int) -> tuple[float, float]:
    """Shared-memory bytes and FLOPs per backward tile pair (`kBlockM` queries x `kBlockN` keys). A product of
    an [r x c] output with reduction `depth`, its warps in a `along_rows` x (warps / along_rows) grid, reads
    each warp's A rows and B columns: 2 * depth * (warps * r / along_rows + c * along_rows) bytes. S = Q K^T
    and dP = dO V^T ([M x N], depth d), dV = P^T dO and dK = dS^T Q ([N x d], depth M), dQ = dS K ([M x d],
    depth N); P and dS are written to shared memory (the dV and dK products read them transposed) and the
    next Q and dO tiles copied in. dQ's fp32 atomic adds go from registers to L2."""
    m, n, warps, s_dp, d_kv, d_q = FLASH_BACKWARD_TILES[d]

    def reads(r: int, c: int, depth: int, along_rows: int) -> int:
        return 2 * depth * (warps * r // along_rows + c * along_rows)

    total = 2 * reads(m, n, d, s_dp) + 2 * reads(n, d, m, d_kv) + reads(m, d, n, d_q)
    total += 2 * 2 * m * n + 2 * 2 * m * d
    return float(total), float(5 * 2 * m * n * d)


def _template_head_dims(d: np.ndarray) -> list[int]:
    """The head dimension of the FlashAttention-2 kernel that runs `d` (it pads up to the next of
    `FLASH_HEAD_DIMS`); 0 where that kernel's tiles are not modelled."""
    templates = [next((t for t in FLASH_HEAD_DIMS if v <= t), 0) for v in np.asarray(d, "float64")]
    return [t if t in FLASH_BACKWARD_TILES else 0 for t in templates]


def tensor_flops_per_clock(hw: HardwareArrays) -> np.ndarray:
    """Per call, dense tensor-core FLOPs per clock per SM (`TENSOR_FLOPS_PER_CLOCK`, else from the catalog)."""
    derived = hw.peak_flops / (hw.sm_count * hw.boost_clock_hz)
    return np.array([TENSOR_FLOPS_PER_CLOCK.get(int(a), x) for a, x in zip(hw.architecture, derived)], dtype="float64")


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
    """FlashAttention-2's memory passes (no product of their own): the backward's and the split-KV merge."""
    return np.char.endswith(op, "process") | np.char.endswith(op, "combine")


def _traffic(
    op: np.ndarray, b: np.ndarray, m: np.ndarray, n: np.ndarray, d: np.ndarray, itemsize: np.ndarray
) -> np.ndarray:
    """HBM bytes per call. Forward: Q, K, V in, O and the log-sum-exp out. Backward: Q, K, V, dO and the row
    statistics in, dK and dV out, the fp32 dQ accumulator written back (its per-tile atomic adds hit L2).
    Preprocess: dO and O in, D out, the accumulator zeroed; postprocess: the accumulator in, dQ out; combine: the
    `n` splits' fp32 partial outputs and log-sum-exps in, O and its log-sum-exp out."""
    q, kv = itemsize * b * m * d, itemsize * b * n * d
    rows = LSE_BYTES * b * m
    accumulator = ACCUMULATOR_BYTES * b * m * d
    forward = 2 * q + 2 * kv + rows
    backward = 2 * q + 4 * kv + 2 * rows + accumulator
    preprocess, postprocess = 2 * q + rows + accumulator, accumulator + q
    combine = n * (accumulator + rows) + q + rows
    is_backward = np.char.find(op, "bwd") >= 0
    return np.select(
        [
            np.char.endswith(op, "preprocess"),
            np.char.endswith(op, "postprocess"),
            np.char.endswith(op, "combine"),
            is_backward,
        ],
        [preprocess, postprocess, combine, backward],
        forward,
    )


def _tensor_core_seconds(
    price: PriceCalls,
    hardware: np.ndarray,
    dtype: np.ndarray,
    b: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    d: np.ndarray,
    itemsize: np.ndarray,
    backward: np.ndarray,
    fused: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        frames.append(
            pd.DataFrame(
                {
                    "hardware": hardware[chosen],
                    "family": "gemm",
                    "op": "bmm",
                    "dtype": dtype[chosen],
                    "batch": batch,
                    "m": gm,
                    "n": gn,
                    "k": gk,
                    # the fused kernel's HBM traffic: the two [length x d] operands; the scores never leave the SM
                    "bytes": itemsize[chosen] * b[chosen] * (m[chosen] + n[chosen]) * d[chosen],
                }
            )
        )
        owners.append(chosen)
    priced = price(pd.concat(frames, ignore_index=True))
    owner = np.concatenate(owners)
    for total, column in zip(out, ("duration_ns", "duration_low_ns", "duration_high_ns")):
        np.add.at(total, owner, priced[column].to_numpy(dtype="float64") * 1e-9)
    return out


def _memory_pass_seconds(
    price: PriceCalls,
    hardware: np.ndarray,
    dtype: np.ndarray,
    op: np.ndarray,
    b: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    d: np.ndarray,
    itemsize: np.ndarray,
    passes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memory passes as the elementwise family prices a pass over [batch x m x d] (the combine: over its `n`
    splits' partial outputs) with their traffic."""
    rows = np.flatnonzero(passes)
    out = tuple(np.zeros(len(b)) for _ in range(3))
    if not len(rows):
        return out
    combine = np.char.endswith(op[rows], "combine")
    keys = np.where(combine, n[rows], m[rows])  # the backward's passes read no keys
    traffic = _traffic(op[rows], b[rows], m[rows], keys, d[rows], itemsize[rows])
    frame = pd.DataFrame(
        {
            "hardware": hardware[rows],
            "family": "elementwise",
            "op": "mul",
            "dtype": dtype[rows],
            "numel": b[rows] * m[rows] * d[rows] * np.where(combine, keys, 1.0),
            "row": d[rows],
            "operands": 2.0,
            "bytes": traffic,
        }
    )
    priced = price(frame)
    for total, column in zip(out, ("duration_ns", "duration_low_ns", "duration_high_ns")):
        total[rows] = priced[column].to_numpy(dtype="float64") * 1e-9
    return out
