"""Swaps in a `CUDAPluggableAllocator` (host malloc/free from the shared library given) before any CUDA
allocation, then runs one kernel: torch's allocator statistics (`memory_stats`) are unavailable with it."""

import sys

import torch

alloc = torch.cuda.memory.CUDAPluggableAllocator(sys.argv[1], "my_malloc", "my_free")
torch.cuda.memory.change_current_allocator(alloc)
x = torch.ones(1024, device="cuda")
y = x * 2
print("script done", flush=True)
