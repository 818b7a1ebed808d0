"""Allocates tensors of the given sizes (bytes) on the GPU and reports what the allocator saw."""

import sys

import torch

held = []
for size in map(int, sys.argv[1:]):
    held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    print(f"allocated {size}", flush=True)
print(f"max_memory_reserved {torch.cuda.max_memory_reserved()}")
print(f"max_memory_allocated {torch.cuda.max_memory_allocated()}")
