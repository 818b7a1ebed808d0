"""The kernel sweep: every config worth measuring, deduplicated, in priority order.

Shapes come from `shapes` (model widths, FFN ratios, heads, sequence lengths, micro-batches, TP
splits). The order makes a short budget still cover everything: families take turns (GEMM and
attention get more turns), and within a family the configs are stratified by op, dtype and size
(one config from each stratum per round, small sizes first within a round, a seeded shuffle inside
each stratum). The same seed always gives the same sweep. Pure Python.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence

from .configs import FAMILIES, KernelConfig, parse_families
from .footprint import footprint
from .shapes import (
    FFN_KINDS,
    HIDDEN_SIZES,
    TP_DEGREES,
    VOCAB_SIZES,
    Linear,
    attention_heads,
    batch_seq_pairs,
    ffn_size,
    gpt_layer_param_shapes,
    head_dims,
    kv_head_options,
    linear_layers,
    padded_vocab,
    split,
    token_counts,
)

HALF_AND_FP32 = ("bf16", "fp16", "fp32")
GEMM_DTYPES = (("bf16", False), ("fp16", False), ("fp32", False), ("fp32", True))
SDPA_BACKENDS = {"flash": ("bf16", "fp16"), "cudnn": ("bf16", "fp16"), "efficient": ("bf16", "fp16", "fp32")}
CASTS = (("fp32", "bf16"), ("bf16", "fp32"), ("fp32", "fp16"), ("fp16", "fp32"))
COPY_BYTES = tuple(4**i for i in range(6, 17))  # 4 KiB .. 4 GiB
MATH_ATTENTION_MAX_SEQ = 4096
"""Longest sequence that training runs through unfused (bmm + softmax) attention."""
MAX_SOFTMAX_ELEMENTS = 1 << 31
MAX_LOSS_TOKENS = 32768
MAX_OPTIMIZER_PARAMS = 1_500_000_000
OPTIMIZER_LAYERS = (1, 2, 4, 8, 16, 32)
FAMILY_WEIGHTS = {"gemm": 3, "attention": 2}
"""Turns per round in the priority order (others: 1)."""
MIN_RANK_HIDDEN = 512
"""Tensor parallelism is used only while each rank keeps at least this much of the hidden size."""


def tp_degrees(hidden: int) -> list[int]:
    return [tp for tp in TP_DEGREES if hidden // tp >= MIN_RANK_HIDDEN]


def model_linears() -> Iterator[Linear]:
    """Every linear layer (blocks and LM head) of every model width, FFN kind and TP degree."""
    for h in HIDDEN_SIZES:
        for tp in tp_degrees(h):
            for ffn in FFN_KINDS:
                yield from linear_layers(h, ffn, tp)
            for vocab in VOCAB_SIZES:
                yield Linear("lm_head", h, padded_vocab(vocab, tp))


def row_widths() -> list[int]:
    """Last dimensions of activations: hidden sizes and TP-split FFN widths."""
    widths = set(HIDDEN_SIZES)
    for h in HIDDEN_SIZES:
        for tp in tp_degrees(h):
            for ffn in FFN_KINDS:
                width = split(ffn_size(h, ffn), tp)
                if width is not None:
                    widths.add(width)
    return sorted(widths)


def sequence_parallel_tokens() -> list[int]:
    """Token counts per rank, including those of sequence parallelism (tokens ÷ TP)."""
    return sorted({t // tp for t in token_counts() for tp in TP_DEGREES if t % tp == 0})


# ---------------------------------------------------------------- one generator per family


def _gemm(dtype: str, tf32: bool, op: str, **shape: int) -> KernelConfig:
    return KernelConfig.make(op, dtype, tf32=tf32, **shape)


def gemm_configs() -> Iterator[KernelConfig]:
    linears = sorted({(lin.in_features, lin.out_features) for lin in model_linears()})
    bmm_heads = sorted(
        {
            (heads, d)
            for h in HIDDEN_SIZES
            for tp in tp_degrees(h)
            for d in head_dims(h)
            if (heads := attention_heads(h, d, tp)) is not None
        }
    )
    for dtype, tf32 in GEMM_DTYPES:
        gemm = functools.partial(_gemm, dtype, tf32)
        for size in (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384):
            yield gemm("mm", m=size, n=size, k=size)
        for t in token_counts():
            for i, o in linears:
                yield gemm("linear", m=t, k=i, n=o)
                yield gemm("addmm", m=t, k=i, n=o)
                yield gemm("linear_grad_input", m=t, k=o, n=i)
                yield gemm("linear_grad_weight", m=o, k=t, n=i)
        for b, s in batch_seq_pairs():
            if s > MATH_ATTENTION_MAX_SEQ:
                continue
            for heads, d in bmm_heads:
                if b * heads * s * s <= MAX_SOFTMAX_ELEMENTS:
                    yield gemm("bmm", batch=b * heads, m=s, k=d, n=s)  # scores q·kᵀ
                    yield gemm("bmm", batch=b * heads, m=s, k=s, n=d)  # probabilities·v


def attention_configs() -> Iterator[KernelConfig]:
    shapes = sorted(
        {
            (heads, kv, d)
            for h in HIDDEN_SIZES
            for d in head_dims(h)
            for tp in tp_degrees(h)
            if (heads := attention_heads(h, d, tp)) is not None
            for kv in kv_head_options(heads, tp)
        }
    )
    for backend, dtypes in SDPA_BACKENDS.items():
        for dtype in dtypes:
            for causal in (1, 0):
                for b, s in batch_seq_pairs():
                    for heads, kv, d in shapes:
                        for op in ("sdpa_fwd", "sdpa_bwd"):
                            yield KernelConfig.make(
                                op,
                                dtype,
                                batch=b,
                                seq=s,
                                heads=heads,
                                kv_heads=kv,
                                head_dim=d,
                                causal=causal,
                                backend=backend,
                            )


def normalization_configs() -> Iterator[KernelConfig]:
    for dtype in HALF_AND_FP32:
        for op in ("layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd"):
            for h in HIDDEN_SIZES:
                for t in sequence_parallel_tokens():
                    yield KernelConfig.make(op, dtype, tokens=t, hidden=h)


def softmax_configs() -> Iterator[KernelConfig]:
    shapes = set()
    for b, s in batch_seq_pairs():  # attention probabilities of unfused attention
        if s <= MATH_ATTENTION_MAX_SEQ:
            shapes.update((b * heads * s, s) for heads in (8, 16, 32) if b * heads * s * s <= MAX_SOFTMAX_ELEMENTS)
    for vocab in VOCAB_SIZES:  # next-token distributions, vocabulary split over TP ranks
        for tp in TP_DEGREES:
            shapes.update((t, padded_vocab(vocab, tp)) for t in token_counts(MAX_LOSS_TOKENS))
    for dtype in HALF_AND_FP32:
        for op in ("softmax_fwd", "softmax_bwd"):
            for rows, cols in sorted(shapes):
                yield KernelConfig.make(op, dtype, rows=rows, cols=cols)


def elementwise_configs() -> Iterator[KernelConfig]:
    widths = row_widths()
    for dtype in HALF_AND_FP32:
        for t in token_counts():
            for w in widths:
                for approximate in ("none", "tanh"):
                    yield KernelConfig.make("gelu_fwd", dtype, tokens=t, hidden=w, approximate=approximate)
                    yield KernelConfig.make("gelu_bwd", dtype, tokens=t, hidden=w, approximate=approximate)
                for op in ("silu_fwd", "silu_bwd", "add", "mul"):
                    yield KernelConfig.make(op, dtype, tokens=t, hidden=w)


def dropout_configs() -> Iterator[KernelConfig]:
    for dtype in HALF_AND_FP32:
        for op in ("dropout_fwd", "dropout_bwd"):
            for h in HIDDEN_SIZES:
                for t in sequence_parallel_tokens():
                    yield KernelConfig.make(op, dtype, tokens=t, hidden=h)


def cross_entropy_configs() -> Iterator[KernelConfig]:
    for dtype in HALF_AND_FP32:
        for op in ("cross_entropy_fwd", "cross_entropy_bwd"):
            for vocab in VOCAB_SIZES:
                for t in token_counts(MAX_LOSS_TOKENS):
                    yield KernelConfig.make(op, dtype, tokens=t, vocab=padded_vocab(vocab, 1))


def embedding_configs() -> Iterator[KernelConfig]:
    for dtype in HALF_AND_FP32:
        for op in ("embedding_fwd", "embedding_bwd"):
            for h in HIDDEN_SIZES:
                for vocab in VOCAB_SIZES:
                    for tp in tp_degrees(h):
                        for t in token_counts():
                            yield KernelConfig.make(op, dtype, tokens=t, hidden=h, vocab=padded_vocab(vocab, tp))


def optimizer_configs() -> Iterator[KernelConfig]:
    for dtype in ("fp32", "bf16"):
        for op in ("adamw_fused", "adamw_foreach"):
            for h in HIDDEN_SIZES:
                for tp in tp_degrees(h):
                    for ffn in FFN_KINDS:
                        shapes = gpt_layer_param_shapes(h, ffn, tp)
                        per_layer = sum(math.prod(s) for s in shapes)
                        for layers in OPTIMIZER_LAYERS:
                            if layers * per_layer <= MAX_OPTIMIZER_PARAMS:
                                yield KernelConfig.make(
                                    op,
                                    dtype,
                                    hidden=h,
                                    ffn=ffn,
                                    tp=tp,
                                    layers=layers,
                                    n_tensors=layers * len(shapes),
                                    n_params=layers * per_layer,
                                )


def copy_configs() -> Iterator[KernelConfig]:
    for t in token_counts():
        for h in HIDDEN_SIZES:
            for src, dst in CASTS:
                yield KernelConfig.make("copy_cast", src, tokens=t, hidden=h, dst_dtype=dst)
            for dtype in ("bf16", "fp32"):
                yield KernelConfig.make("copy_transpose", dtype, tokens=t, hidden=h)


def memcpy_configs() -> Iterator[KernelConfig]:
    for size in COPY_BYTES:
        for pinned in (1, 0):
            yield KernelConfig.make("memcpy_h2d", "u8", bytes=size, pinned=pinned)
            yield KernelConfig.make("memcpy_d2h", "u8", bytes=size, pinned=pinned)
        yield KernelConfig.make("memcpy_d2d", "u8", bytes=size)


def memset_configs() -> Iterator[KernelConfig]:
    for size in COPY_BYTES:
        yield KernelConfig.make("cuda_memset", "u8", bytes=size)
        for dtype in ("bf16", "fp32"):
            yield KernelConfig.make("fill_zero", dtype, bytes=size)


GENERATORS: dict[str, Callable[[], Iterator[KernelConfig]]] = {
    "gemm": gemm_configs,
    "attention": attention_configs,
    "normalization": normalization_configs,
    "softmax": softmax_configs,
    "elementwise": elementwise_configs,
    "dropout": dropout_configs,
    "cross_entropy": cross_entropy_configs,
    "embedding": embedding_configs,
    "optimizer": optimizer_configs,
    "copy": copy_configs,
    "memcpy": memcpy_configs,
    "memset": memset_configs,
}


# ---------------------------------------------------------------- dedup and priority order


def dedup(configs: Iterable[KernelConfig]) -> list[KernelConfig]:
    """The configs without repeats, first occurrence kept."""
    return list(dict.fromkeys(configs))


def size_bucket(config: KernelConfig) -> int:
    """Size class of a config: the bytes of one set of its inputs, in powers of four."""
    return int(math.log2(max(1, footprint(config).rotated_bytes))) // 2


def stratified(configs: Sequence[KernelConfig], rng: random.Random) -> list[KernelConfig]:
    """One config from each (op, dtype, size) stratum per round, smaller sizes first within a round,
    each stratum in a seeded random order."""
    strata: dict[tuple, list[KernelConfig]] = defaultdict(list)
    for c in configs:
        strata[(size_bucket(c), c.op, c.dtype, c.tf32)].append(c)
    queues = []
    for key in sorted(strata):
        members = strata[key]
        rng.shuffle(members)
        queues.append(members)
    return _interleave(queues, [1] * len(queues))


def _interleave(queues: list[list[KernelConfig]], turns: list[int]) -> list[KernelConfig]:
    """Round-robin over `queues`, taking `turns[i]` items from queue i per round."""
    out: list[KernelConfig] = []
    positions = [0] * len(queues)
    while len(out) < sum(len(q) for q in queues):
        for i, q in enumerate(queues):
            take = q[positions[i] : positions[i] + turns[i]]
            positions[i] += len(take)
            out.extend(take)
    return out


def build_sweep(families: Sequence[str] = FAMILIES, seed: int = 0) -> list[KernelConfig]:
    """The sweep over `families` in priority order (deterministic for a given seed)."""
    parse_families(",".join(families))
    chosen = [f for f in FAMILIES if f in families]
    queues = [stratified(dedup(GENERATORS[f]()), random.Random(f"{seed}:{f}")) for f in chosen]
    return _interleave(queues, [FAMILY_WEIGHTS.get(f, 1) for f in chosen])


def plan_summary(configs: Sequence[KernelConfig]) -> list[tuple[str, str, int]]:
    """(family, dtype, count) for every family and dtype in `configs`, in family order."""
    counts = Counter((c.family, c.dtype + ("+tf32" if c.tf32 else "")) for c in configs)
    return sorted(((f, d, n) for (f, d), n in counts.items()), key=lambda r: (FAMILIES.index(r[0]), r[1]))
