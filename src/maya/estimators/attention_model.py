"""Fused attention priced from public measurements (`data/kernels_public/attention/`): the composed mechanism
(`families.attention`) corrected by a model learned, per implementation family, on measured kernels.

What was measured (`attention/README.md`): FlashAttention-2's figures, fwd+bwd of FlashAttention-2, v1, xformers'
CUTLASS kernels, OpenAI-Triton flash attention and eager PyTorch on an A100 SXM4 and an H100 SXM5 (the last three
on the A100 alone); TritonBench's forward and backward timed separately on Meta's H100-class machines
(`kernels_public_data.OWN_DEVICE`).

The model, per implementation family (`IMPLEMENTATIONS`): log(measured / composed) of a fwd+bwd row is linear in
the shape (`features`: log2 sequence length, log2 head dimension, causal; for FlashAttention v1 also the inverse
length, `INVERSE_LENGTH_FAMILIES`), fitted by ridge regression. Every fit
(the correction, the split, FlexAttention's ratio) holds the sequence length to the range it was measured on
(`ShapeFit`): beyond it, the composed mechanism alone carries the change with length. The
composed time carries what differs between GPUs (the GEMM family's products on that GPU, its exp2 and FP32 rates,
its tensor-core generation, HBM bandwidth); with two measured GPUs the correction cannot learn hardware terms
of its own, so it stays a function of the shape and transfers through the composed prior. How it transfers is
judged by leaving each GPU out (`leave_one_gpu_out`).

A fwd+bwd row does not say how its time splits: the split is the TritonBench rows' measured backward / forward
time from `DEVICE_RATIO_MIN_SEQ` tokens, fitted on the sequence length and causality (`RATIO_IMPLEMENTATIONS`,
`SPLIT`); the ratio is a property of the kernels, so it is taken from that device, for every GPU, although its
absolute times are not. llm-foundry's Triton kernel takes FlashAttention v1's correction less the measured gap
between FlashAttention v1's and OpenAI Triton's change from head dim 64 to 128 (`TritonProxyFit`). FlexAttention
(Triton templates) is measured on that device only, next to FlashAttention-2: it is priced as FlashAttention-2
times the measured flex / FlashAttention-2 ratio per direction (`flex_ratio`). cuDNN's SDPA kernels, never
measured, are priced from their nearest measured kernel: on Hopper their own composed time times a correction
per direction to TritonBench's FlashAttention-3 rows from `HOPPER_MIN_SEQ` tokens carried to an SXM5
(`hopper_rows`, `device_ratio`), judged with each length band left out (`hopper_held_out`); before Hopper as
FlashAttention-2; after Hopper (sm_100 on, never measured here) by the composed mechanism alone. Torch's own port of
FlashAttention-2 (SDPA's flash backend, `torchflash`) is measured on that device next to the flash-attn package, in the
same TritonBench run: it is priced as FlashAttention-2 times that measured port / package ratio per direction
(`port_ratio`: 1.04-1.08 forward, 1.02-1.06 backward).

Each priced call's band is the 10th-90th percentile of log(measured / predicted) on GPUs held out (the family's
rows on one GPU alone: its residuals in training, which understate the error on another GPU).
"""

from __future__ import annotations

import functools
import hashlib
import json
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from maya.core.paths import write_atomic

from .hardware_table import hardware_arrays

if TYPE_CHECKING:  # the attention family prices by this module; scikit-learn loads at the first fit
    from .families.base import Composed, PriceCalls

IMPLEMENTATIONS: dict[str, str] = {
    "FlashAttention-2": "flash2",
    "FlashAttention": "flash1",
    "xformers": "efficient",
    "FlashAttention Triton": "triton",
}
"""The figures' implementations -> the family the model learns (`Pytorch`, eager attention, is Maya's own GEMM
and softmax kernels: not a fused kernel)."""
RATIO_IMPLEMENTATIONS = ("sdpa", "flash_v2")
"""TritonBench's FlashAttention-2 kernels (torch's bundled copy, the flash-attn package): the backward / forward
split."""
FLEX = "flex_attention"
PORT = "sdpa"
"""TritonBench's SDPA under `sdpa_kernel([SDPBackend.FLASH_ATTENTION])`: torch's port of FlashAttention-2, timed in the
same run, on the same shapes, as the flash-attn package (`flash_v2`): the port's ratio to the package (`port_ratio`)."""
CALL_KERNELS: dict[str, tuple[str, str]] = {
    "sdpa": ("flash2", "flash"),
    "flash": ("flash2", "flash"),
    "efficient": ("efficient", "efficient"),
    "flex": ("flash2", "flash"),
    "flash1": ("flash1", "flash"),
    "lftriton": ("lftriton", "flash"),
    "torchflash": ("flash2", "flash"),
}
"""Call-frame kernel (op prefix) -> the family that prices it and the composed kernel its prior is (`flex`:
FlashAttention-2 times `flex_ratio`; `torchflash`, torch's port of FlashAttention-2: FlashAttention-2 (the
package's figures) times `port_ratio`; `flash1`, FlashAttention v1's CUDA kernels (the figures' rows; no traced call
is named so); `lftriton`, llm-foundry's Triton kernel, which has no public timing: its proxy, FlashAttention v1's
correction less the measured A100 gap between FA1's and OpenAI Triton's change from head dim 64 to 128, per length
and mask (`TritonProxyFit`), `attention/README.md` section 3; `sdpa`, cuDNN, never measured: before Hopper its
kernels are FlashAttention-2-like, priced as FlashAttention-2; on Hopper by `AttentionModel.hopper`; after
Hopper by the composed mechanism alone)."""
TRITON_FAMILY = "triton"
"""OpenAI Triton's flash attention (the A100 figure): the Triton kernel whose head-dimension dependence llm-foundry's
kernel is priced with (`TritonProxyFit`)."""
PROXY_HEAD_DIMS = (64.0, 128.0)
"""The head dimensions both FlashAttention v1 and OpenAI Triton were measured at: at the first llm-foundry's kernel
takes FlashAttention v1's correction, at the second that less the measured gap (`TritonProxyFit`)."""
WARP_SPECIALISED_MIN_ARCHITECTURE = 90
"""cuDNN's SDPA engines from sm_90 on use asynchronous warpgroup MMA with warp specialisation."""
HOPPER_ARCHITECTURE = 90
"""The one architecture FlashAttention-3's rows describe: its correction prices cuDNN on sm_90 alone. Later parts
(sm_100 on) run other engines (tcgen05 MMA, tensor memory) no row here measures, so their cuDNN calls keep the
composed mechanism alone, as before FlashAttention-3 priced cuDNN."""
HOPPER_PROXY = "flash_v3"
"""TritonBench's FlashAttention-3: the measured kernel nearest cuDNN's sm_90 SDPA engines (warp-specialised,
asynchronous warpgroup MMA, TMA), which price `sdpa` calls on Hopper (`AttentionModel.hopper`)."""
INLINE_PASSES = frozenset({"sdpa"})
"""Call kernels whose backward has no memory-pass calls of its own: their backward carries the prior's passes."""
PROXY_UNCERTAINTY: dict[str, float] = {"lftriton": 0.20, "sdpa": 0.20}
"""Relative uncertainty of a kernel priced from a proxy, beyond the proxy's own band: the band's ends move out by
this factor. llm-foundry's Triton kernel: "±20 % would not be surprising" (`attention/README.md` section 3).
cuDNN: no handed row compares it with FlashAttention-3 or FlashAttention-2, so the same 20 %, a conservative
figure, not a measured spread."""
DEVICE_RATIO_MIN_SEQ = 8192.0
"""TritonBench's FlashAttention-2 rows compared with the SXM5 figures (`device_ratio`) and the backward / forward
split fitted (`_split`) from this length: shorter, TritonBench's backward carries a fixed timing overhead of about
0.6 ms (backward / forward 5.5-5.8 at 512 tokens, 2.6-3.0 from 8k)."""
HOPPER_MIN_SEQ = 2048.0
"""FlashAttention-3's rows fitted and judged from this length (`hopper_rows`). Shorter, a fixed cost of the harness
dominates TritonBench's timing: its 2025 backward at 128 tokens (2 GFLOP) takes 69 us, 29 TFLOP/s, and at 1k
still at half its 16k rate; a fit in log2 length through those rows priced a 128-token H100 cuDNN backward
slower than the A100's. Such a cost weighs under 5 % from 2k tokens (1.5 ms
backward). Shorter calls take the correction at this length (`ShapeFit`)."""
SEQ_BANDS = (4096.0,)
"""Sequence bands the Hopper proxy's fit is judged on, each left out in turn: 2k-4k, 8k and more."""
COMPOSED_KERNEL: dict[str, str] = {"flash2": "flash", "flash1": "flash", "triton": "flash", "efficient": "efficient"}
"""The composed mechanism each family's rows are compared with."""
RIDGE_ALPHA = 1e-2
BAND = (0.1, 0.9)
REFERENCE_SEQ, REFERENCE_HEAD_DIM = 4096.0, 64.0


SHAPE, INVERSE_SHAPE, LENGTH, SPLIT = (0, 1, 2), (0, 1, 2, 3), (0,), (0, 2)
"""Columns of `features` a fit takes: the shape (the corrections), with the reference length over the length for
`INVERSE_LENGTH_FAMILIES`, the log2 length (FlexAttention's ratio), the log2 length and causality (the backward /
forward split)."""
INVERSE_LENGTH_FAMILIES = frozenset({"flash1"})
"""Families whose correction also takes the inverse length: measured rates rise steeply to 2k tokens and saturate by
16k, which a line in log2 length cannot follow. The figures run 16k tokens a call at every length, so the term
cannot tell a cost per call from one per tile; it is kept where it improves the family's leave-one-GPU-out error
(`benchmarks/estimators_public.py --attention-only`): FlashAttention v1 10.0 / 11.5 % without it, 9.7 / 9.3 % with
it (A100 / H100), and its 16k rows, where every longer call is priced, +4 % in training without it. FlashAttention-2
is worse with it (A100 4.4 -> 5.6 %, H100 5.8 -> 5.7 %); the CUTLASS kernels (`efficient`) are measured on one GPU,
so nothing shows it transfers."""


def features(seq: np.ndarray, head_dim: np.ndarray, causal: np.ndarray) -> np.ndarray:
    """The shape as the fits see it: log2 sequence and head dimension (centred), the causal flag, and the reference
    length over the sequence length."""
    seq = np.asarray(seq, "float64")
    return np.column_stack(
        [
            np.log2(seq / REFERENCE_SEQ),
            np.log2(np.asarray(head_dim, "float64") / REFERENCE_HEAD_DIM),
            np.asarray(causal, "float64"),
            REFERENCE_SEQ / seq,
        ]
    )


@dataclass(frozen=True)
class ShapeFit:
    """A log ratio fitted by ridge regression on the `columns` of `features`, priced with the sequence length
    held to `seq_range`, the lengths it was fitted on.

    Measured attention throughput saturates in sequence length (the fused kernels of the FlashAttention-2 figures
    gain 1.8% on average from 8k to 16k tokens, at most 6.5%; TritonBench's non-causal backward / forward ratio
    goes 2.95 -> 2.86), while a line in log2 length keeps going: fitted from 512 tokens, where a call's fixed
    costs weigh more, the FlashAttention v1 correction grew 3.3% a doubling past 16k tokens (x 2.31 at 16k,
    x 2.46 at 64k) and the split's backward / forward factor fell from 0.97 to 0.81, pricing the forward (run
    twice under activation checkpointing) ever slower per FLOP. Past the measured lengths a fit keeps its value
    at the nearer end; the composed mechanism's own (saturating) dependence on length carries the rest."""

    coef: np.ndarray
    """The ridge regression's coefficients on `columns` (`Ridge.coef_`)."""
    intercept: float
    seq_range: tuple[float, float]
    columns: tuple[int, ...]
    head_dim_range: tuple[float, float] | None = None
    """Where set, the head dimension is held to this range too (the measured head dimensions)."""

    def predict(self, seq: np.ndarray, head_dim: np.ndarray, causal: np.ndarray) -> np.ndarray:
        """The fitted log ratio for each shape: `Ridge.predict`'s own product, `x @ coef_ + intercept_`; ValueError
        naming the first shape whose features are not finite (a NaN or infinite length or head dimension), as
        `Ridge.predict` raised."""
        held = np.clip(np.asarray(seq, "float64"), *self.seq_range)
        if self.head_dim_range is not None:
            head_dim = np.clip(np.asarray(head_dim, "float64"), *self.head_dim_range)
        x = features(held, head_dim, causal)[:, list(self.columns)]
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            at = int(np.flatnonzero(~finite)[0])
            shape = (np.broadcast_to(v, finite.shape)[at] for v in (seq, head_dim, causal))
            raise ValueError(
                "attention call of sequence length {}, head dimension {}, causal {}: not a finite shape, "
                "cannot be priced".format(*shape)
            )
        return x @ self.coef + self.intercept

    def to_dict(self) -> dict:
        """JSON-ready (floats round-trip exactly)."""
        return {
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "seq_range": list(self.seq_range),
            "columns": list(self.columns),
            "head_dim_range": None if self.head_dim_range is None else list(self.head_dim_range),
        }

    @classmethod
    def from_dict(cls, data: dict) -> ShapeFit:
        """As `to_dict` wrote it; ValueError when its coefficients are not one per column."""
        head_dim_range = data["head_dim_range"]
        coef, columns = np.array(data["coef"], dtype="float64"), tuple(int(c) for c in data["columns"])
        if coef.shape != (len(columns),):
            raise ValueError(f"a shape fit of {len(columns)} columns has coefficients of shape {coef.shape}")
        return cls(
            coef,
            float(data["intercept"]),
            (float(data["seq_range"][0]), float(data["seq_range"][1])),
            columns,
            None if head_dim_range is None else (float(head_dim_range[0]), float(head_dim_range[1])),
        )


@dataclass(frozen=True)
class TritonProxyFit:
    """The log correction of llm-foundry's Triton kernel: FlashAttention v1's (`level`) less, in proportion to
    log2(head dim / 64) held to `PROXY_HEAD_DIMS`, the measured gap between FlashAttention v1's and OpenAI Triton's
    change from head dim 64 to 128: log(v1 / Triton) at 128 less at 64, the A100 figure's fwd+bwd times per length
    and causality (`gap_seq`, `gap_causal`, `gap_plain`), interpolated in log2 length and held to the measured
    lengths past them.

    The kernel is Tri Dao's Triton port of OpenAI's Triton fused-attention tutorial (its docstring: tiles of
    128 x 128 queries x keys for every head dim up to 128, and "Make the backward for d=128 much faster by
    reducing register spilling"), not FlashAttention v1's CUDA kernels. The gap depends on the length and the mask:
    at 16k tokens 0.156 causal, 0.230 not (v1's head dim 128 runs 14-25 % slower per FLOP than its 64, OpenAI
    Triton's at one rate); at 512-2k causal -0.04 to -0.11 (there Triton's head dim 128 loses more than v1's). It
    is measured on the A100 alone and carried to every GPU."""

    level: ShapeFit
    gap_seq: np.ndarray
    gap_causal: np.ndarray
    gap_plain: np.ndarray

    def gap(self, seq: np.ndarray, causal: np.ndarray) -> np.ndarray:
        """log(v1 / Triton) at head dim 128 less at 64 for each length and mask."""
        x, at = np.log2(self.gap_seq), np.log2(np.asarray(seq, "float64"))
        return np.where(np.asarray(causal, bool), np.interp(at, x, self.gap_causal), np.interp(at, x, self.gap_plain))

    def predict(self, seq: np.ndarray, head_dim: np.ndarray, causal: np.ndarray) -> np.ndarray:
        """The log correction for each shape."""
        low, high = PROXY_HEAD_DIMS
        weight = np.log2(np.clip(np.asarray(head_dim, "float64"), low, high) / low) / np.log2(high / low)
        return self.level.predict(seq, head_dim, causal) - weight * self.gap(seq, causal)

    def to_dict(self) -> dict:
        """JSON-ready (floats round-trip exactly)."""
        return {
            "level": self.level.to_dict(),
            "gap_seq": self.gap_seq.tolist(),
            "gap_causal": self.gap_causal.tolist(),
            "gap_plain": self.gap_plain.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> TritonProxyFit:
        arrays = (np.array(data[name], dtype="float64") for name in ("gap_seq", "gap_causal", "gap_plain"))
        return cls(ShapeFit.from_dict(data["level"]), *arrays)


def triton_proxy(level: ShapeFit, figures: pd.DataFrame) -> TritonProxyFit:
    """llm-foundry's kernel priced from FlashAttention v1's correction `level` and the gap of `figures`' fwd+bwd
    rows of v1 and OpenAI Triton measured on one GPU at both `PROXY_HEAD_DIMS`, per length and mask."""
    both = figures[figures["family"].isin(["flash1", TRITON_FAMILY]) & figures["head_dim"].isin(PROXY_HEAD_DIMS)]
    device = both.loc[both["family"] == TRITON_FAMILY, "device"].unique()
    if len(device) != 1:
        raise ValueError(f"kernels_public: OpenAI Triton's attention must be measured on one GPU, found {list(device)}")
    times = both[both["device"] == device[0]].pivot_table(
        index=["causal", "seqlen"], columns=["family", "head_dim"], values="time_s"
    )
    low, high = PROXY_HEAD_DIMS
    gap = np.log(times["flash1", high] / times[TRITON_FAMILY, high]) - np.log(
        times["flash1", low] / times[TRITON_FAMILY, low]
    )
    gap = gap.dropna()
    causal, plain = gap.xs(True, level="causal"), gap.xs(False, level="causal")
    if not causal.index.equals(plain.index) or len(causal) < 2:
        raise ValueError("kernels_public: FlashAttention v1 and OpenAI Triton need the same lengths, causal and not")
    return TritonProxyFit(level, causal.index.to_numpy("float64"), causal.to_numpy(), plain.to_numpy())


def _fit(
    seq: pd.Series, head_dim: pd.Series, causal: pd.Series, y: np.ndarray, columns: tuple[int, ...] = SHAPE
) -> ShapeFit:
    """`y` fitted on the shapes' `columns` of `features`, with the lengths' range."""
    from sklearn.linear_model import Ridge  # scikit-learn (~1 s) loads when a model is fitted, not with the family

    x = features(seq, head_dim, causal)[:, list(columns)]
    seq_range = (float(np.min(seq)), float(np.max(seq)))
    ridge = Ridge(alpha=RIDGE_ALPHA).fit(x, y)
    return ShapeFit(np.asarray(ridge.coef_, dtype="float64"), float(ridge.intercept_), seq_range, columns)


@dataclass(frozen=True)
class AttentionModel:
    """Per family, the fitted log correction of fwd+bwd and its band; the backward / forward split; FlexAttention's
    ratio to FlashAttention-2 per direction; per direction, the log correction of cuDNN's composed time on Hopper
    to FlashAttention-3's measured one (`hopper`, `hopper_fit`) and its band; torch's FlashAttention-2 port's ratio
    to the flash-attn package per direction (`port_ratio`)."""

    corrections: dict[str, ShapeFit | TritonProxyFit]
    bands: dict[str, tuple[float, float]]
    split: ShapeFit
    flex_ratio: dict[str, ShapeFit]
    hopper: dict[str, ShapeFit]
    hopper_bands: dict[str, tuple[float, float]]
    port_ratio: dict[str, ShapeFit]

    def factors(
        self,
        family: str,
        seq: np.ndarray,
        head_dim: np.ndarray,
        causal: np.ndarray,
        fwd_s: np.ndarray,
        bwd_s: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per shape, the (forward, backward) factors on the composed times `fwd_s`, `bwd_s` (the backward with its
        memory passes): together they make fwd+bwd the learned correction, its backward / forward time the
        measured ratio `split` says."""
        total = np.exp(self.corrections[family].predict(seq, head_dim, causal)) * (fwd_s + bwd_s)
        ratio = np.exp(self.split.predict(seq, head_dim, causal))
        return total / (1.0 + ratio) / fwd_s, total * ratio / (1.0 + ratio) / bwd_s

    def to_dict(self) -> dict:
        """JSON-ready: every fit's coefficients and ranges, every band (floats round-trip exactly)."""
        return {
            "corrections": {name: fit.to_dict() for name, fit in self.corrections.items()},
            "proxied": sorted(name for name, fit in self.corrections.items() if isinstance(fit, TritonProxyFit)),
            "bands": {name: list(band) for name, band in self.bands.items()},
            "split": self.split.to_dict(),
            "flex_ratio": {name: fit.to_dict() for name, fit in self.flex_ratio.items()},
            "hopper": {name: fit.to_dict() for name, fit in self.hopper.items()},
            "hopper_bands": {name: list(band) for name, band in self.hopper_bands.items()},
            "port_ratio": {name: fit.to_dict() for name, fit in self.port_ratio.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> AttentionModel:
        proxied = set(data["proxied"])
        return cls(
            {
                name: (TritonProxyFit if name in proxied else ShapeFit).from_dict(fit)
                for name, fit in data["corrections"].items()
            },
            {name: (float(low), float(high)) for name, (low, high) in data["bands"].items()},
            ShapeFit.from_dict(data["split"]),
            {name: ShapeFit.from_dict(fit) for name, fit in data["flex_ratio"].items()},
            {name: ShapeFit.from_dict(fit) for name, fit in data["hopper"].items()},
            {name: (float(low), float(high)) for name, (low, high) in data["hopper_bands"].items()},
            {name: ShapeFit.from_dict(fit) for name, fit in data["port_ratio"].items()},
        )


def rows() -> pd.DataFrame:
    """The valid attention rows of the shipped files, with their implementation family (`family`)."""
    return _shipped_rows().copy()


@functools.lru_cache(maxsize=1)
def _shipped_rows() -> pd.DataFrame:
    """`rows`, read and validated once per process (pandera loads here, not with the attention family)."""
    from .kernels_public_data import load

    valid = load().rows
    attention = valid[valid["dataset"].str.startswith("attn")].copy()
    attention["family"] = attention["kernel_impl"].map(IMPLEMENTATIONS).fillna("")
    return attention.reset_index(drop=True)


Mechanism = Callable[[pd.DataFrame], "Composed"]
"""Prices a frame of attention calls by the composed mechanism alone (`AttentionPredictor.priced_by`)."""


def composed_rows(frame: pd.DataFrame, mechanism: Mechanism, hardware: pd.Series | None = None) -> pd.DataFrame:
    """Per row of `frame` (seqlen, head_dim, causal, batch, n_heads, dtype_name), the composed mechanism's forward
    and backward seconds (`fwd_s`, `bwd_s`: the fused backward and its two memory passes) with the kernel
    `COMPOSED_KERNEL` names for its family, on `hardware` (default: the row's device)."""
    kernel = frame["family"].map(COMPOSED_KERNEL).fillna("flash").to_numpy()
    suffix = np.where(frame["causal"].to_numpy(bool), "_causal", "")
    parts = {
        "fwd": np.char.add(np.char.add(kernel.astype(str), "_fwd"), suffix),
        "bwd": np.char.add(np.char.add(kernel.astype(str), "_bwd"), suffix),
        "pre": np.where(kernel == "flash", "flash_bwd_preprocess", ""),
        "post": np.where(kernel == "flash", "flash_bwd_postprocess", ""),
    }
    base = pd.DataFrame(
        {
            "hardware": (frame["device"] if hardware is None else hardware).to_numpy(),
            "family": "attention",
            "dtype": frame["dtype_name"].to_numpy(),
            "batch": (frame["batch"] * frame["n_heads"]).to_numpy(),
            "m": frame["seqlen"].to_numpy(),
            "n": frame["seqlen"].to_numpy(),
            "k": frame["head_dim"].to_numpy(),
        }
    )
    calls = pd.concat([base.assign(op=op, part=name) for name, op in parts.items()], ignore_index=True)
    calls = calls[calls["op"] != ""].reset_index()
    seconds = mechanism(calls).seconds
    row = calls["index"].to_numpy() % len(frame)
    fwd, bwd = np.zeros(len(frame)), np.zeros(len(frame))
    forward = (calls["part"] == "fwd").to_numpy()
    np.add.at(fwd, row[forward], seconds[forward])
    np.add.at(bwd, row[~forward], seconds[~forward])
    return pd.DataFrame({"fwd_s": fwd, "bwd_s": bwd}, index=frame.index)


def _log_residual(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    return np.log(np.asarray(measured, "float64") / np.asarray(predicted, "float64"))


def _split(tritonbench: pd.DataFrame) -> ShapeFit:
    """log(measured backward / forward time) on the log2 sequence length and causality, fitted from 8k tokens
    (`DEVICE_RATIO_MIN_SEQ`; shorter calls take the 8k value), from TritonBench's FlashAttention-2 rows timed both
    ways on one shape: a property of the kernel's algorithm (five products against two, and the backward's
    extra passes), taken as it was measured on every GPU.

    The ratio was once the measured one over the composed mechanism's on an H100, carried to other GPUs through
    their composed ratio; on the A100 that priced the forward 28 % slower per FLOP than the backward (backward /
    forward 1.95 at 16k tokens, head dim 128), against the one split measured (2.56-2.86 at 16k: the forward the
    faster per FLOP) and llm-foundry's Triton kernel's docstring (its forward faster than FlashAttention v1's,
    its backward slower), and activation checkpointing, which runs the forward twice, made it count twice."""
    rows_ = tritonbench[
        tritonbench["kernel_impl"].isin(RATIO_IMPLEMENTATIONS) & (tritonbench["seqlen"] >= DEVICE_RATIO_MIN_SEQ)
    ]
    keys = ["source_commit", "kernel_impl", "batch", "n_heads", "seqlen", "head_dim", "causal"]
    paired = rows_[rows_["direction"] == "fwd"].merge(
        rows_[rows_["direction"] == "bwd"][[*keys, "time_s"]], on=keys, suffixes=("", "_bwd")
    )
    measured_ratio = paired["time_s_bwd"].to_numpy() / paired["time_s"].to_numpy()
    return _fit(paired["seqlen"], paired["head_dim"], paired["causal"], np.log(measured_ratio), SPLIT)


def _flex_ratio(tritonbench: pd.DataFrame) -> dict[str, ShapeFit]:
    """Per direction, log(FlexAttention / FlashAttention-2) on the sequence length, from TritonBench rows of one
    commit and shape."""
    return _ratio_to_package(tritonbench, FLEX, LENGTH)


def _port_ratio(tritonbench: pd.DataFrame) -> dict[str, ShapeFit]:
    """Per direction, log(torch's FlashAttention-2 port / the flash-attn package) on the sequence length and causality,
    from TritonBench rows of one commit and shape (the port is 4-8% slower forward, 2-6% backward, more so causal).

    Fitted on every measured length (512-16k), unlike the split (from 8k): below 8k TritonBench's backward carries a
    fixed cost of about 0.6 ms (`DEVICE_RATIO_MIN_SEQ`), which pulls a ratio towards 1 if both paid it alike, so the
    short backward ratios (1.05-1.06 at 512) may understate the kernels' (about 1.09 if so); from 8k alone the fit
    would give less, not more. One device (head dim 128, an August 2024 torch nightly and flash-attn release) is
    carried to every GPU, head dimension and release, as the split is."""
    return _ratio_to_package(tritonbench, PORT, SPLIT)


def _ratio_to_package(tritonbench: pd.DataFrame, implementation: str, columns: tuple[int, ...]) -> dict[str, ShapeFit]:
    """Per direction, log(`implementation` / the flash-attn package's FlashAttention-2) fitted on `columns` of
    `features`, from TritonBench rows of one commit and shape timed both ways."""
    keys = ["source_commit", "batch", "n_heads", "seqlen", "head_dim", "causal", "direction"]
    flash = tritonbench[tritonbench["kernel_impl"] == "flash_v2"][[*keys, "time_s"]]
    paired = tritonbench[tritonbench["kernel_impl"] == implementation].merge(flash, on=keys, suffixes=("", "_flash"))
    out = {}
    for direction in ("fwd", "bwd"):
        here = paired[paired["direction"] == direction]
        ratio = np.log(here["time_s"].to_numpy() / here["time_s_flash"].to_numpy())
        out[direction] = _fit(here["seqlen"], here["head_dim"], here["causal"], ratio, columns)
    return out


def measured_rows(mechanism: Mechanism) -> pd.DataFrame:
    """The fwd+bwd rows of the catalog's GPUs with their composed times (`composed_s`) and features."""
    from .kernels_public_data import OWN_DEVICE

    found = rows()
    figures = found[(found["direction"] == "fwd+bwd") & (found["family"] != "") & (found["device"] != OWN_DEVICE)]
    composed = composed_rows(figures, mechanism)
    return figures.assign(fwd_s=composed["fwd_s"], bwd_s=composed["bwd_s"], composed_s=composed.sum(axis=1))


def fit(mechanism: Mechanism) -> AttentionModel:
    """The model of each family a call kernel is priced by (`CALL_KERNELS`), fitted on every measured GPU, with
    bands from each GPU held out in turn (a family measured on one GPU: its training residuals)."""
    from .kernels_public_data import OWN_DEVICE

    measured = measured_rows(mechanism)
    figures = measured[measured["family"].isin({family for family, _ in CALL_KERNELS.values()})]
    found = rows()
    tritonbench = found[found["device"] == OWN_DEVICE]
    corrections, bands = {}, {}
    for family, group in figures.groupby("family"):
        corrections[family] = _correction(group)
        out = _held_out_residuals(group)
        residuals = out if out is not None else _log_residual(group["time_s"], _learned(corrections[family], group))
        bands[family] = tuple(float(q) for q in np.quantile(residuals, BAND))
    corrections["lftriton"] = triton_proxy(corrections["flash1"], measured)
    bands["lftriton"] = bands["flash1"]
    hopper, hopper_bands = {}, {}
    for direction, group in hopper_rows(mechanism).groupby("direction"):
        hopper[direction] = hopper_fit(group)
        hopper_bands[direction] = tuple(float(q) for q in np.quantile(_held_out_by_band(group)[0], BAND))
    return AttentionModel(
        corrections,
        bands,
        _split(tritonbench),
        _flex_ratio(tritonbench),
        hopper,
        hopper_bands,
        _port_ratio(tritonbench),
    )


def device_ratio(found: pd.DataFrame) -> float:
    """log(H100 SXM5 / TritonBench's device) of FlashAttention-2's measured fwd+bwd times, the mean over the shapes
    both measured from `DEVICE_RATIO_MIN_SEQ` tokens (the figures' FlashAttention-2 and TritonBench's `flash_v2`,
    head dim 128, causal or not): how much faster the SXM5 runs the same kernel (-4 % at 16k, `attention/README.md`
    section 2). Shorter shapes are left out: there TritonBench's backward timing carries a fixed overhead of
    about 0.6 ms (its backward / forward ratio 5.5 at 512 tokens, 2.9 at 16k), not a property of the device."""
    from .kernels_public_data import OWN_DEVICE

    keys = ["seqlen", "head_dim", "causal"]
    tritonbench = found[(found["device"] == OWN_DEVICE) & (found["kernel_impl"] == "flash_v2")]
    both = tritonbench.groupby(keys)["time_s"].agg(["sum", "size"]).reset_index()
    both = both[(both["size"] == 2) & (both["seqlen"] >= DEVICE_RATIO_MIN_SEQ)]  # one forward and one backward
    sxm = found[(found["device"] == "h100-sxm") & (found["kernel_impl"] == "FlashAttention-2")]
    paired = both.merge(sxm[[*keys, "time_s"]], on=keys)
    if paired.empty:
        raise ValueError("kernels_public: no FlashAttention-2 shape measured both on an H100 SXM5 and by TritonBench")
    return float(np.log(paired["time_s"] / paired["sum"]).mean())


def hopper_rows(mechanism: Mechanism) -> pd.DataFrame:
    """FlashAttention-3's TritonBench rows (`HOPPER_PROXY`, non-causal) from `HOPPER_MIN_SEQ` tokens, each with its
    time carried to an H100 SXM5 (`sxm_s`: times `device_ratio`) and the composed time of cuDNN's kernel (`sdpa`)
    there (`composed_s`)."""
    from .kernels_public_data import OWN_DEVICE

    found = rows()
    proxy = found[
        (found["device"] == OWN_DEVICE) & (found["kernel_impl"] == HOPPER_PROXY) & (found["seqlen"] >= HOPPER_MIN_SEQ)
    ].copy()
    proxy["sxm_s"] = proxy["time_s"] * np.exp(device_ratio(found))
    suffix = np.where(proxy["causal"].to_numpy(bool), "_causal", "")
    calls = pd.DataFrame(
        {
            "hardware": "h100-sxm",
            "family": "attention",
            "op": np.char.add(np.char.add("sdpa_", proxy["direction"].to_numpy().astype(str)), suffix),
            "dtype": proxy["dtype_name"].to_numpy(),
            "batch": (proxy["batch"] * proxy["n_heads"]).to_numpy(),
            "m": proxy["seqlen"].to_numpy(),
            "n": proxy["seqlen"].to_numpy(),
            "k": proxy["head_dim"].to_numpy(),
        }
    )
    return proxy.assign(composed_s=mechanism(calls).seconds)


def hopper_fit(frame: pd.DataFrame) -> ShapeFit:
    """log(FlashAttention-3 on an SXM5 / cuDNN composed) of one direction's rows on the sequence length, and on
    the head dimension where more than one was measured (the backward: head dim 64 alone, so head dim 128's
    backward takes 64's correction on its own composed time), both held to the measured range (a head dim of 256
    takes 128's). The rows are non-causal: a causal call keeps the composed mechanism's causal share of tiles."""
    columns = (0, 1) if frame["head_dim"].nunique() > 1 else LENGTH
    y = _log_residual(frame["sxm_s"], frame["composed_s"])
    shape_fit = _fit(frame["seqlen"], frame["head_dim"], frame["causal"], y, columns)
    return replace(shape_fit, head_dim_range=(float(frame["head_dim"].min()), float(frame["head_dim"].max())))


def _held_out_by_band(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """log(measured / learned) of each row with its sequence band (`SEQ_BANDS`) left out of the fit, and the
    rows' bands."""
    band = np.searchsorted(SEQ_BANDS, frame["seqlen"].to_numpy("float64"))
    out = np.zeros(len(frame))
    for b in np.unique(band):
        train, test = frame[band != b], frame[band == b]
        learned_s = test["composed_s"] * np.exp(
            hopper_fit(train).predict(test["seqlen"], test["head_dim"], test["causal"])
        )
        out[band == b] = _log_residual(test["sxm_s"], learned_s)
    return out, band


def hopper_held_out(mechanism: Mechanism) -> pd.DataFrame:
    """Per direction and sequence band left out: rows, cuDNN's composed mechanism's and the learned model's (fitted
    on the other bands) mean signed and mean absolute error against FlashAttention-3 carried to an SXM5
    (fractions, predicted / measured - 1)."""
    out = []
    for direction, group in hopper_rows(mechanism).groupby("direction"):
        residual, band = _held_out_by_band(group)
        composed = (group["composed_s"] / group["sxm_s"] - 1).to_numpy()
        for b in np.unique(band):
            mine = band == b
            learned_error = np.exp(-residual[mine]) - 1
            out.append(
                {
                    "direction": direction,
                    "band": ("2k-4k", ">=8k")[b],
                    "rows": int(mine.sum()),
                    "composed_signed": composed[mine].mean(),
                    "composed_mape": np.abs(composed[mine]).mean(),
                    "learned_signed": learned_error.mean(),
                    "learned_mape": np.abs(learned_error).mean(),
                }
            )
    return pd.DataFrame(out)


def _held_out_residuals(group: pd.DataFrame) -> np.ndarray | None:
    """log(measured / learned) of each GPU's rows, learned on the family's other GPUs (None: one GPU only)."""
    devices = group["device"].unique()
    if len(devices) < 2:
        return None
    out = []
    for device in devices:
        train, test = group[group["device"] != device], group[group["device"] == device]
        out.append(_log_residual(test["time_s"], _learned(_correction(train), test)))
    return np.concatenate(out)


def _correction(frame: pd.DataFrame) -> ShapeFit:
    """The log correction of the composed times (`composed_s`) fitted on `frame`'s measured rows (of one family)."""
    columns = INVERSE_SHAPE if frame["family"].iloc[0] in INVERSE_LENGTH_FAMILIES else SHAPE
    return _fit(
        frame["seqlen"],
        frame["head_dim"],
        frame["causal"],
        _log_residual(frame["time_s"], frame["composed_s"]),
        columns,
    )


def _learned(correction: ShapeFit, frame: pd.DataFrame) -> pd.Series:
    """`frame`'s composed times corrected by `correction`."""
    return frame["composed_s"] * np.exp(correction.predict(frame["seqlen"], frame["head_dim"], frame["causal"]))


def leave_one_gpu_out(mechanism: Mechanism) -> pd.DataFrame:
    """Per implementation family and GPU held out: rows, the learned model's (fitted on the other GPUs) and the
    composed mechanism's mean signed and mean absolute error (fractions, predicted / measured - 1)."""
    figures = measured_rows(mechanism)
    out = []
    for (family, device), test in figures.groupby(["family", "device"]):
        train = figures[(figures["family"] == family) & (figures["device"] != device)]
        composed_error = test["composed_s"] / test["time_s"] - 1
        entry = {
            "family": family,
            "gpu": device,
            "rows": len(test),
            "composed_signed": composed_error.mean(),
            "composed_mape": composed_error.abs().mean(),
            "learned_signed": np.nan,
            "learned_mape": np.nan,
        }
        if len(train):
            error = _learned(_correction(train), test) / test["time_s"] - 1
            entry.update(learned_signed=error.mean(), learned_mape=error.abs().mean())
        out.append(entry)
    return pd.DataFrame(out)


_FITTED: dict[int, AttentionModel] = {}

FIT_INPUTS = ("maya/estimators", "maya/core", "maya/data/kernels_public", "maya/data/hardware", "maya_trace_spec")
"""What a fit depends on besides the estimator's artifact (sources and shipped data, relative to the folder holding
the `maya` package): the pricing of the composed mechanism (with the trace spec's dtypes and kernel families) and
the measured rows it is fitted on."""
FIT_LIBRARIES = (("xgboost", "xgboost-cpu"), ("scikit-learn",), ("numpy",), ("pandas",))
"""The installed libraries whose versions a fit depends on too, each by its distribution names (XGBoost's CPU-only
wheel is `xgboost-cpu`): XGBoost gives the composed times, scikit-learn's ridge regression fits them, numpy and
pandas compute both."""


def _versions() -> str:
    """Maya's version and each of `FIT_LIBRARIES`' installed one (`none` where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    from maya import __version__

    def installed(names: tuple[str, ...]) -> str:
        for name in names:
            try:
                return f"{name}={version(name)}"
            except PackageNotFoundError:
                pass
        return f"{names[0]}=none"

    return ",".join([f"maya={__version__}", *(installed(names) for names in FIT_LIBRARIES)])


def fitted(price: PriceCalls, mechanism: Mechanism) -> AttentionModel:
    """The model fitted with `mechanism` priced by `price` (an estimator's `predict`: the composed times are that
    estimator's), once per estimator; for an estimator read from a registered artifact, once per artifact and Maya's
    sources and data (`stored_fit`: fitted in one process, read back in the next)."""
    owner = getattr(price, "__self__", price)
    key = id(owner)
    model = _FITTED.get(key)
    if model is None:
        path = stored_fit(owner)
        model = _read_fit(path) if path is not None else None
        if model is None:
            model = fit(mechanism)
            if path is not None:
                try:
                    write_atomic(path, json.dumps(model.to_dict(), sort_keys=True).encode())
                except OSError:  # a home it cannot write to (read-only, full): fitted again next time
                    pass
        _FITTED[key] = model
        weakref.finalize(owner, _FITTED.pop, key, None)
    return model


def stored_fit(estimator: object) -> Path | None:
    """Where the attention model fitted with a registered estimator is kept (`$MAYA_HOME/cache/attention_model/`),
    named by its artifact's SHA-256 (`KernelEstimator.artifact_sha256`), the digest of `FIT_INPUTS` and the versions
    of Maya and `FIT_LIBRARIES`; None for an estimator not read from an artifact."""
    from maya.core.digest import files_digest
    from maya.core.paths import maya_home

    artifact = getattr(estimator, "artifact_sha256", None)
    if artifact is None:
        return None
    root = Path(__file__).resolve().parent.parent.parent
    files = [(p, root) for folder in FIT_INPUTS for p in sorted((root / folder).rglob("*")) if p.suffix != ".pyc"]
    inputs = files_digest(_versions(), files)
    name = hashlib.sha256(f"{artifact}:{inputs}".encode()).hexdigest()[:24]
    return maya_home() / "cache" / "attention_model" / f"{name}.json"


def _read_fit(path: Path) -> AttentionModel | None:
    """The stored model, None when there is none or it cannot be read (it is fitted again and rewritten): missing,
    not JSON, or damaged (a missing or misshapen entry, a fit whose coefficients do not match its columns)."""
    try:
        return AttentionModel.from_dict(json.loads(path.read_bytes()))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def learned(calls: pd.DataFrame, composed: Composed, price: PriceCalls, mechanism: Mechanism) -> Composed:
    """`composed` with the calls of a measured implementation, or of one with a measured proxy (`CALL_KERNELS`),
    priced by the learned model: the composed time of the call (of its prior's kernel) times its direction's
    factor (`AttentionModel.factors`; FlexAttention also times `flex_ratio`, torch's port `port_ratio`), in the band of its family's held-out
    residuals widened by `PROXY_UNCERTAINTY`; cuDNN's (`sdpa`) on Hopper: its own composed time times its
    direction's `AttentionModel.hopper` correction; after Hopper, `composed` as it is. A split-KV forward's merge
    (`*_fwd_combine`) keeps `composed`, its memory pass. `mechanism` prices attention calls by the composed
    mechanism."""
    op = calls["op"].astype(str)
    kernel = op.str.split("_").str[0].to_numpy()
    # a split-KV forward's merge was never measured apart (the public forwards fill the GPU unsplit): its memory pass
    priced = np.isin(kernel, list(CALL_KERNELS)) & ~op.str.endswith("_combine").to_numpy()
    cudnn = priced & (kernel == "sdpa")
    if cudnn.any():  # after Hopper, cuDNN keeps the composed mechanism alone (`HOPPER_ARCHITECTURE`)
        priced[cudnn] = hardware_arrays(calls[cudnn]).architecture <= HOPPER_ARCHITECTURE
    if not priced.any():
        return composed
    model = fitted(price, mechanism)
    kernel, op = kernel[priced], op[priced]
    family = np.array([CALL_KERNELS[k][0] for k in kernel])
    base = np.array([CALL_KERNELS[k][1] for k in kernel])
    causal = op.str.endswith("_causal").to_numpy()
    backward = op.str.contains("bwd").to_numpy()
    passes = op.str.endswith("process").to_numpy()
    suffix = np.where(causal, "_causal", "")
    frame = calls.loc[priced, ["hardware", "dtype", "batch", "m", "n", "k"]].reset_index(drop=True)
    frame = frame.assign(family="attention")
    ops = {
        "fwd": np.char.add(np.char.add(base.astype(str), "_fwd"), suffix),
        "bwd": np.char.add(np.char.add(base.astype(str), "_bwd"), suffix),
        "pre": np.where(base == "flash", "flash_bwd_preprocess", ""),
        "post": np.where(base == "flash", "flash_bwd_postprocess", ""),
    }
    seconds = {}
    for name, values in ops.items():
        present = values != ""
        seconds[name] = np.zeros(len(frame))
        if present.any():
            seconds[name][present] = mechanism(frame[present].assign(op=values[present])).seconds
    fwd_s, bwd_s = seconds["fwd"], seconds["bwd"] + seconds["pre"] + seconds["post"]
    hopper = (kernel == "sdpa") & (hardware_arrays(frame).architecture == HOPPER_ARCHITECTURE)
    seq, head_dim = frame["m"].to_numpy("float64"), frame["k"].to_numpy("float64")
    factor, low, high = np.ones(len(frame)), np.ones(len(frame)), np.ones(len(frame))
    for name in np.unique(family):
        mine = family == name
        f, b = model.factors(name, seq[mine], head_dim[mine], causal[mine], fwd_s[mine], bwd_s[mine])
        factor[mine] = np.where(backward[mine], b, f)
        low[mine], high[mine] = np.exp(model.bands[name][0]), np.exp(model.bands[name][1])
    widen = np.array([1.0 + PROXY_UNCERTAINTY.get(k, 0.0) for k in kernel])
    for direction, mine in (("fwd", hopper & ~backward), ("bwd", hopper & backward)):
        if mine.any():
            factor[mine] = np.exp(model.hopper[direction].predict(seq[mine], head_dim[mine], causal[mine]))
            low[mine], high[mine] = (np.exp(q) for q in model.hopper_bands[direction])
    # a fused call of a kernel other than its prior's is priced as the prior's fused kernel of its direction (with
    # the prior's memory passes where the kernel has none of its own); cuDNN on Hopper from its own composed time
    inline = np.isin(kernel, list(INLINE_PASSES))
    prior = np.where(backward, np.where(inline, bwd_s, seconds["bwd"]), seconds["fwd"])
    own = np.where((kernel != base) & ~passes & ~hopper, prior, composed.seconds[priced])
    # measured against the package's FlashAttention-2 per direction (torch's port: the whole backward was timed, so
    # its memory passes take the ratio too)
    for name, ratios in (("flex", model.flex_ratio), ("torchflash", model.port_ratio)):
        mine = kernel == name
        if mine.any():
            shape = (seq[mine], head_dim[mine], causal[mine])
            ratio = np.where(backward[mine], ratios["bwd"].predict(*shape), ratios["fwd"].predict(*shape))
            own[mine] = own[mine] * np.exp(ratio)
    seconds_out, low_out, high_out = composed.seconds.copy(), composed.low_s.copy(), composed.high_s.copy()
    seconds_out[priced] = own * factor
    low_out[priced] = seconds_out[priced] * low / widen
    high_out[priced] = seconds_out[priced] * high * widen
    return replace(composed, seconds=seconds_out, low_s=low_out, high_s=high_out)
