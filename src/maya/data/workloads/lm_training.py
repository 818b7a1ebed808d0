"""The training loop of the reference workloads: next-token prediction on random tokens with AdamW
(fused on CUDA), in fp32 or under bf16 autocast. Plain PyTorch, no Maya imports."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def add_training_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq", type=int, default=1024, help="sequence length (default 1024)")
    parser.add_argument("--batch", type=int, default=8, help="micro-batch size (default 8)")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps (default 50)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (default: fp32)")
    parser.add_argument("--checkpoint", action="store_true", help="activation checkpointing of every block")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--log-every", type=int, default=10, help="print the loss every N steps (default 10)")


def pick_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train(model: nn.Module, vocab: int, args: argparse.Namespace, device: str) -> None:
    """`args.steps` steps on `args.batch` random sequences of `args.seq` tokens."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device == "cuda")
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
