"""A training loop whose first step leaves the caching allocator holding more than tensors ever take: two 40 MiB
tensors, the first freed, then a 100 MiB one that fits none of the freed blocks (a new segment, or the
expandable segment grown past the second). Peak allocated 140 MiB, held 180 MiB (plus the model's few KiB).
`expandable` as the argument sets `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` first, as the
modded-nanogpt records do. Prints what torch's allocator says at the end."""

import json
import os
import sys

if sys.argv[1:] == ["expandable"]:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch

MIB = 2**20
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    if step == 0:
        first = torch.empty(40 * MIB, dtype=torch.uint8, device="cuda")
        second = torch.empty(40 * MIB, dtype=torch.uint8, device="cuda")
        del first
        large = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
        del second, large
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
