"""Blocks under non-reentrant activation checkpointing, fused AdamW."""

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

blocks = nn.ModuleList(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)) for _ in range(4)).cuda()
opt = torch.optim.AdamW(blocks.parameters(), fused=True)
x = torch.randn(32, 256, device="cuda", requires_grad=True)
for _i in range(2):
    h = x
    for b in blocks:
        h = checkpoint(b, h, use_reentrant=False)
    h.sum().backward()
    opt.step()
    opt.zero_grad()
print("ok")
