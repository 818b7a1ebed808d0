"""GPT-style decoder (GPT-3 paper sizes) trained on random tokens: a reference workload for
ground-truth measurements. Plain PyTorch (LayerNorm, GELU MLP, SDPA causal attention, learned
positions, tied embeddings); uses CUDA when available, else the CPU.

    python gpt.py --size 1.3b --seq 2048 --batch 4 --bf16 [--checkpoint]
    python gpt.py --layers 2 --dim 64 --heads 4 --vocab 256 --seq 32   # explicit dimensions
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from lm_training import add_training_args, count_params, pick_device, train
from torch.utils.checkpoint import checkpoint

SIZES = {  # layers, d_model, heads: GPT-3 paper, table 2.1
    "125m": (12, 768, 12),
    "350m": (24, 1024, 16),
    "760m": (24, 1536, 16),
    "1.3b": (24, 2048, 16),  # the table's 24 heads of 128 do not make 2048; 16 x 128 as GPT-Neo 1.3B
    "2.7b": (32, 2560, 32),
}
VOCAB = 50304  # GPT-2's 50257 tokens padded to a multiple of 64


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int, checkpoint: bool = False):
        super().__init__()
        self.checkpoint = checkpoint
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)  # GPT-2's scale: logits of a sane size with tied weights

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint and self.training else block(x)
        return self.head(self.ln(x))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a GPT-style decoder on random tokens.")
    p.add_argument("--size", choices=SIZES, default="125m", help="GPT-3 size (default 125m)")
    p.add_argument("--layers", type=int, help="override the size's layers")
    p.add_argument("--dim", type=int, help="override the size's model width")
    p.add_argument("--heads", type=int, help="override the size's attention heads")
    p.add_argument("--vocab", type=int, default=VOCAB)
    add_training_args(p)
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> GPT:
    layers, dim, heads = SIZES[args.size]
    return GPT(args.vocab, args.dim or dim, args.heads or heads, args.layers or layers, args.seq, args.checkpoint)


def main() -> None:
    args = parse_args()
    device = pick_device()
    torch.manual_seed(0)
    with torch.device(device):  # build the weights where they will live
        model = build(args)
    print(f"GPT: {count_params(model) / 1e6:.1f}M parameters on {device}", flush=True)
    train(model, args.vocab, args, device)


if __name__ == "__main__":
    main()
