"""Only what every rank of a script pays before its first step: import torch, join the process group on
the rank's device, leave (benchmarks/search.py --time-point)."""

import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
dist.barrier()
dist.destroy_process_group()
