"""Dimensions that real transformer training uses: model widths, FFN ratios, heads, sequence lengths,
micro-batches, vocabularies, and how tensor parallelism (TP) splits them.

Pure Python; the sweep draws its shapes from here.
"""

from __future__ import annotations

from dataclasses import dataclass

HIDDEN_SIZES = (512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 12288, 16384)
HEAD_DIMS = (64, 128)
TP_DEGREES = (1, 2, 4, 8)
SEQ_LENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
VOCAB_SIZES = (32000, 50304, 128256)
FFN_KINDS = ("gelu", "swiglu")
MAX_TOKENS = 65536
"""Most tokens in one micro-batch (batch × seq) the sweep uses."""
LLAMA_KV_HEADS = 8
"""Key/value heads of grouped-query attention in Llama-style models (before the TP split)."""


def ffn_size(hidden: int, kind: str) -> int:
    """FFN width: 4·hidden for GELU MLPs; SwiGLU's 8/3·hidden rounded up to a multiple of 256 (Llama)."""
    if kind == "gelu":
        return 4 * hidden
    if kind == "swiglu":
        return -(-8 * hidden // 3 // 256) * 256
    raise ValueError(f"unknown FFN kind {kind!r}")


def token_counts(max_tokens: int = MAX_TOKENS) -> list[int]:
    """Distinct batch × seq products up to `max_tokens`."""
    return sorted({b * s for b in BATCH_SIZES for s in SEQ_LENS if b * s <= max_tokens})


def batch_seq_pairs(max_tokens: int = MAX_TOKENS) -> list[tuple[int, int]]:
    return [(b, s) for b in BATCH_SIZES for s in SEQ_LENS if b * s <= max_tokens]


def split(size: int, tp: int) -> int | None:
    """`size` split over `tp` ranks, or None when it does not divide."""
    return size // tp if size % tp == 0 else None


def padded_vocab(vocab: int, tp: int) -> int:
    """Vocabulary rows per rank, padded as Megatron does (to a multiple of 128·tp)."""
    unit = 128 * tp
    return -(-vocab // unit) * unit // tp


@dataclass(frozen=True)
class Linear:
    """A linear layer as one TP rank holds it: weight [out_features, in_features]."""

    name: str
    in_features: int
    out_features: int


def linear_layers(hidden: int, ffn: str, tp: int) -> list[Linear]:
    """The linear layers of one transformer block on one rank (column-parallel outputs and row-parallel
    inputs divided by `tp`); layers whose split does not divide are left out."""
    f = ffn_size(hidden, ffn)
    up = 2 * f if ffn == "swiglu" else f  # SwiGLU's gate and up projections run as one GEMM
    candidates = [
        ("qkv", hidden, split(3 * hidden, tp)),
        ("attn_out", split(hidden, tp), hidden),
        ("ffn_up", hidden, split(up, tp)),
        ("ffn_down", split(f, tp), hidden),
    ]
    return [Linear(name, i, o) for name, i, o in candidates if i is not None and o is not None]


def head_dims(hidden: int) -> tuple[int, ...]:
    """Head sizes models of this width use: 64 up to GPT-2 XL widths, 128 from 2048 up (GPT-3, Llama)."""
    return tuple(d for d in HEAD_DIMS if (d == 64 and hidden <= 2048) or (d == 128 and hidden >= 2048))


def attention_heads(hidden: int, head_dim: int, tp: int) -> int | None:
    """Query heads per rank, or None when they do not split evenly."""
    heads = split(hidden, head_dim)
    return None if heads is None else split(heads, tp)


def kv_head_options(heads: int, tp: int) -> list[int]:
    """Multi-head attention (kv = q heads) and, where it divides, Llama-style grouped-query attention."""
    gqa = max(1, LLAMA_KV_HEADS // tp)
    return [heads, gqa] if gqa < heads and heads % gqa == 0 else [heads]


def gpt_layer_param_shapes(hidden: int, ffn: str, tp: int) -> list[tuple[int, ...]]:
    """Parameter shapes of one transformer block on one rank: GPT-2 style (GELU: biases, LayerNorm
    weight and bias) or Llama style (SwiGLU: no biases, RMSNorm weight)."""
    shapes: list[tuple[int, ...]] = []
    for layer in linear_layers(hidden, ffn, tp):
        shapes.append((layer.out_features, layer.in_features))
        if ffn == "gelu":
            shapes.append((layer.out_features,))
    norms = [(hidden,), (hidden,)] * (2 if ffn == "gelu" else 1)
    return shapes + norms
