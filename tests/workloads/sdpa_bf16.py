"""Scaled dot-product attention in bf16, forward and backward, as a model would call it."""

import argparse

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--causal", action="store_true")
args = p.parse_args()
q, k, v = (torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
out.sum().backward()
