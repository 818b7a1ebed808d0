"""Weights initialised by rejection sampling, then three training steps.

torch's `nn.init.trunc_normal_` loops `while True: mask = (w < lo) | (w > hi); if not mask.any(): break`.
Small tensors copied from the host (real bytes, all 1) fill the caching allocator's small blocks first, so
every later small output, the reduction's included, holds 1s: read as the device bytes, the mask would
never be empty (as it happens by chance in torchtitan's model init).
"""

import torch

stale = [torch.ones(512, dtype=torch.uint8).cuda() for _ in range(8192)]
del stale
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).cuda()
for p in model.parameters():
    torch.nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(32, 256, device="cuda")
for _ in range(3):
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("initialised and trained")
