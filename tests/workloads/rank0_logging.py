"""DDP training where only rank 0 logs the loss (a host sync the other ranks do not make)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
ddp = DDP(nn.Linear(256, 256).cuda(), device_ids=[local])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(2):
    loss = ddp(torch.randn(8, 256, device="cuda")).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.4f}")
