"""Ranks check that they agree as DeepSpeed ZeRO-3 does (`assert_ints_same_as_other_ranks`): rank 0 broadcasts a
value every other rank compares with its own, the others' buffers holding -1 until it arrives. `--fail-rank R`:
rank R then raises anyway (a rank failing alone)."""

import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
value = torch.tensor([7 if rank == 0 else -1, 3 if rank == 0 else -1], device="cuda")
dist.broadcast(value, src=0)
if value.tolist() != [7, 3]:
    raise RuntimeError(f"ranks disagree:\n rank0: {value.tolist()}\n rank{rank}: [7, 3]")
if rank == args.fail_rank:
    raise RuntimeError(f"rank {rank} fails:\n on purpose")
dist.destroy_process_group()
