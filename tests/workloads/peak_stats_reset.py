"""A script that resets the allocator's peak statistics after its first step, as torchtune's recipes do after logging
them: a 100 MiB tensor in step 0, then small steps. Prints the peak it read before the reset and the one after.
`python peak_stats_reset.py [cuda|accelerator|legacy]`: reset by `torch.cuda.reset_peak_memory_stats` (the default),
`torch.accelerator.reset_peak_memory_stats` or `torch.cuda.reset_max_memory_allocated`."""

import json
import sys

import torch

MIB = 2**20
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seen = {}
for step in range(3):
    if step == 0:
        large = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        del large
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
    if step == 0:
        seen["before_reset"] = torch.cuda.max_memory_allocated()
        reset = sys.argv[1] if len(sys.argv) > 1 else "cuda"
        if reset == "accelerator":
            torch.accelerator.reset_peak_memory_stats()
        elif reset == "legacy":
            torch.cuda.reset_max_memory_allocated()
        else:
            torch.cuda.reset_peak_memory_stats()
seen["after_reset"] = torch.cuda.max_memory_allocated()
print(json.dumps(seen))
