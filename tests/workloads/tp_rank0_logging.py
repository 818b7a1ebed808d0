"""Data parallel x tensor parallel (2-D mesh) where only rank 0 logs the loss."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))
mlp = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
mlp = parallelize_module(mlp, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
for step in range(2):
    loss = mlp(torch.randn(8, 512, device="cuda")).pow(2).mean()
    loss.backward()
    for p in mlp.parameters():  # data-parallel gradient average over the dp dimension
        dist.all_reduce(p.grad.to_local(), group=mesh["dp"].get_group())
    opt.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
