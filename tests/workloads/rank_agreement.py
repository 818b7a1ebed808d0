"""Ranks check that they agree as DeepSpeed ZeRO-3 does (`assert_ints_same_as_other_ranks`): rank 0 broadcasts a
value every other rank compares with its own, the others' buffers holding -1 until it arrives."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
value = torch.tensor(7 if rank == 0 else -1, device="cuda")
dist.broadcast(value, src=0)
if value.item() != 7:
    raise RuntimeError(f"ranks disagree:\n rank0: {value.item()}\n rank{rank}: 7")
dist.destroy_process_group()
