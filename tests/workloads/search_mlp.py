"""A DDP MLP whose batch and width come from the command line and environment (for `maya search`)."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=32)
args = p.parse_args()
width = int(os.environ.get("MLP_WIDTH", "1024"))
dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = DDP(
    nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).cuda(), device_ids=[local]
)
opt = torch.optim.AdamW(model.parameters(), fused=True)
for _step in range(3):
    model(torch.randn(args.batch, width, device="cuda")).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
