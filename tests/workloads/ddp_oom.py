"""A DDP MLP whose activations do not fit: every rank asks for more device memory than an 80 GB GPU has in
its first forward (the `--tokens` batch through a 8192-wide layer), so rank 0 runs out of memory."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=1 << 20)
args = parser.parse_args()

dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = nn.Sequential(nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 8192)).cuda()
ddp = DDP(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), fused=True)
for _step in range(3):
    loss = ddp(torch.randn(args.tokens, 8192, device="cuda")).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
