"""A Linear(4096 -> 11008) trained one step in bf16 autocast: the GEMMs are known exactly."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=2048)
args = p.parse_args()
layer = torch.nn.Linear(4096, 11008, bias=False).cuda()
x = torch.randn(args.tokens, 4096, device="cuda", requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = layer(x)
y.float().sum().backward()
print("peak reserved", torch.cuda.max_memory_reserved())
