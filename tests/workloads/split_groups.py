"""Process groups split off the world communicator as Megatron builds them (a rank joins one group more
than its peer: `new_group([0])` before `new_group([0, 1])`), then world collectives, a barrier and an
optimizer step each iteration: the world's collectives must still line up across the ranks."""

import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
x = torch.ones(4, device="cuda")
dist.all_reduce(x)
g_first = dist.new_group([0])
g_all = dist.new_group([0, 1])
dist.all_reduce(x, group=g_all)
for _ in range(3):
    dist.barrier()
    dist.all_reduce(x)
    w = torch.nn.Linear(4, 4).cuda()
    opt = torch.optim.SGD(w.parameters(), lr=0.1)
    w(x).sum().backward()
    opt.step()
dist.destroy_process_group()
