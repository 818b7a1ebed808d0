"""The PyTorch DDP tutorial's launch: `python spawn_ddp.py` starts one worker per GPU with
`torch.multiprocessing.spawn`, each joining the group with its own rank (`init_process_group(rank=i)`)."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world_size: int, steps: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = DDP(nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(torch.randn(64, 1024, device=rank)), torch.randn(64, 1024, device=rank)).backward()
        optimizer.step()
    print(f"worker {rank} of {world_size} on cuda:{torch.cuda.current_device()} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    gpus = torch.cuda.device_count()
    mp.spawn(train, args=(gpus, int(sys.argv[1]) if len(sys.argv) > 1 else 5), nprocs=gpus, join=True)
