"""A tiny mixture of experts trained for a few steps: a top-1 router sends each token to one expert
(its indices found with `torch.where`, whose size is read from the device), loss logged with `.item()`."""

import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--experts", type=int, default=4)
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()


class MoE(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.router = nn.Linear(dim, args.experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(args.experts))

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = torch.where(choice == e)[0]
            out[rows] = expert(x[rows])
        return out


model = MoE().cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(256, 64, device="cuda")
for step in range(args.steps):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}: loss {loss.item():.3f}")
