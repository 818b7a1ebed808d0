"""Point-to-point over the world group (`group=None`), as Megatron's interleaved schedule sends one
direction: ranks 0 and 1 send to ranks 2 and 3, then a small optimizer step, twice. Run it with the legacy
process group (`TORCH_DIST_USE_NCCL2=0`), which opens a 2-rank communicator per pair of peers."""

import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
x = torch.ones(4, device="cuda")
w = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(w.parameters(), lr=0.1)
for _ in range(2):
    work = dist.isend(x, dst=rank + 2) if rank < 2 else dist.irecv(x, src=rank - 2)
    work.wait()
    w(x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
