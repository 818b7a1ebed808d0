"""FSDP2 over the data-parallel dim and tensor parallelism over the other dim of a 2-D DeviceMesh."""

import os

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
model = nn.Sequential(
    *[nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)) for _ in range(2)]
).cuda()
for layer in model:
    parallelize_module(layer, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(layer, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _i in range(2):
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
print("ok")
