"""Two ranks that decide differently on a device value: each reads its own rank from its GPU, and rank 1 skips the
third step's all-reduce (as an overflow check that reads another value on one rank skips a step there)."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
weight = torch.randn(1024, 1024, device="cuda", requires_grad=True)
optimizer = torch.optim.SGD([weight], lr=0.1)
flag = torch.full((1,), float(rank), device="cuda")
for step in range(4):
    (torch.randn(64, 1024, device="cuda") @ weight).square().mean().backward()
    if not (step == 2 and flag.item() > 0.5):
        dist.all_reduce(weight.grad)
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
