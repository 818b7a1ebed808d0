"""Llama-style decoder trained on random tokens: a reference workload for ground-truth measurements.
Plain PyTorch: RMSNorm, SwiGLU MLP, rotary position embeddings, grouped-query attention (SDPA,
causal); uses CUDA when available, else the CPU.

    python llama.py --size 1b --seq 2048 --batch 4 --bf16 [--checkpoint]
    python llama.py --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 256 --seq 32
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from lm_training import add_training_args, count_params, pick_device, train
from torch.utils.checkpoint import checkpoint

SIZES = {  # layers, dim, heads, kv_heads, ffn, vocab, tied embeddings
    "125m": (12, 768, 12, 4, 2048, 32000, False),
    "1b": (16, 2048, 32, 8, 8192, 128256, True),  # Llama 3.2 1B (1.24 B parameters)
    "3b": (28, 3072, 24, 8, 8192, 128256, True),  # Llama 3.2 3B (3.21 B parameters)
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """cos and sin of the rotary angles of every position, (seq, head_dim)."""

    def __init__(self, head_dim: int, seq: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-2]
        return x * self.cos[:t].to(x.dtype) + rotate_half(x) * self.sin[:t].to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, rotary: Rotary):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.rotary = rotary
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (b, heads, t, head_dim) and k, v (b, kv_heads, t, head_dim), positions applied to q and k."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return self.rotary(q), self.rotary(k), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.project(x)
        group = self.heads // self.kv_heads  # query heads sharing one key/value head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int, rotary: Rotary):
        super().__init__()
        self.attn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads, kv_heads, rotary)
        self.mlp_norm = nn.RMSNorm(dim, eps=1e-5)
        self.mlp = SwiGLU(dim, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(
        self,
        vocab: int,
        dim: int,
        heads: int,
        kv_heads: int,
        ffn: int,
        layers: int,
        seq: int,
        tied: bool = False,
        rope_theta: float = 500000.0,
        checkpoint: bool = False,
    ):
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads do not split into {kv_heads} key/value head groups")
        self.checkpoint = checkpoint
        self.embed = nn.Embedding(vocab, dim)
        rotary = Rotary(dim // heads, seq, rope_theta)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, ffn, rotary) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint and self.training else block(x)
        return self.head(self.norm(x))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a Llama-style decoder on random tokens.")
    p.add_argument("--size", choices=SIZES, default="125m", help="preset (default 125m)")
    for name in ("layers", "dim", "heads", "kv-heads", "ffn", "vocab"):
        p.add_argument(f"--{name}", type=int, help=f"override the size's {name}")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    add_training_args(p)
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> Llama:
    layers, dim, heads, kv_heads, ffn, vocab, tied = SIZES[args.size]
    return Llama(
        args.vocab or vocab,
        args.dim or dim,
        args.heads or heads,
        args.kv_heads or kv_heads,
        args.ffn or ffn,
        args.layers or layers,
        args.seq,
        tied,
        args.rope_theta,
        args.checkpoint,
    )


def main() -> None:
    args = parse_args()
    device = pick_device()
    torch.manual_seed(0)
    with torch.device(device):  # build the weights where they will live
        model = build(args)
    print(f"Llama: {count_params(model) / 1e6:.1f}M parameters on {device}", flush=True)
    train(model, model.head.out_features, args, device)


if __name__ == "__main__":
    main()
