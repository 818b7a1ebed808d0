"""Python objects and a Gloo group beside NCCL, as training scripts use them for configuration and
bookkeeping."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
rank = dist.get_rank()
config = [{"lr": 0.1, "from": rank}] if rank == 0 else [None]
dist.broadcast_object_list(config, src=0)
print("broadcast", config[0])
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, {"rank": rank})
print("all_gather_object", len(gathered))
shard = [None]
dist.scatter_object_list(shard, [f"shard{i}" for i in range(dist.get_world_size())] if rank == 0 else None, src=0)
print("scatter", shard[0])
cpu_group = dist.new_group(backend="gloo")
flag = torch.ones(1)
dist.all_reduce(flag, group=cpu_group)
dist.monitored_barrier(group=cpu_group)
barrier_group = dist.new_group(backend="gloo", timeout=timedelta(days=10000))  # Lightning Fabric's _InfiniteBarrier
barrier_group.monitored_barrier()
print("monitored_barrier")
dist.destroy_process_group(barrier_group)
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
print("done")
dist.destroy_process_group()
