"""A training loop whose first step leaves the caching allocator holding more than it hands out: a 100 MiB
block is freed, then two 60 MiB tensors are made; the first splits the cached block (40 MiB stay free in it),
the second needs a new 60 MiB segment. Peak allocated 120 MiB, reserved 160 MiB (plus the model's few KiB);
prints what torch's allocator says at the end."""

import json

import torch

MIB = 2**20
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    if step == 0:
        del_me = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        del del_me
        held = [torch.empty(60 * MIB, dtype=torch.uint8, device="cuda") for _ in range(2)]
        del held
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
print(
    json.dumps(
        {
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
        }
    )
)
