"""Dot products of 1,000-element vectors in fp32, fp64 and bf16 (cuBLAS's `cublasSdot_v2`, `cublasDdot_v2` and
`cublasDotEx`), each result read on the host."""

import torch

for dtype in (torch.float32, torch.float64, torch.bfloat16):
    x = torch.ones(1000, device="cuda", dtype=dtype)
    print(dtype, float(torch.dot(x, x)))
