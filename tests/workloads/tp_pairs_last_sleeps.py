"""Tensor-parallel pairs (groups [0, 1], [2, 3], ...) all-reducing a product; the last rank first sleeps `argv[1]`
seconds (a rank no capture needs: deduplication captures rank 0 alone, a TP pair lies inside the one class)."""

import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank % torch.cuda.device_count())
pairs = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
if rank == world - 1:
    time.sleep(float(sys.argv[1]))
w = torch.randn(256, 256, device="cuda")
x = torch.randn(64, 256, device="cuda")
for _ in range(3):
    y = x @ w
    dist.all_reduce(y, group=pairs[rank // 2])
dist.destroy_process_group()
