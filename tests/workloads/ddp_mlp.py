"""An MLP trained with DistributedDataParallel (NCCL) for a few steps, launched like torchrun."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
ddp = DDP(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), fused=True)
for _step in range(3):
    loss = ddp(torch.randn(32, 1024, device="cuda")).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
