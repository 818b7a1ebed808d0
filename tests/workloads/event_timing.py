"""CUDA-event timings of known work: 1, 2 and 4 bf16 1024^3 GEMMs on the timed stream (and one on another
stream, which the timing does not cover)."""

import torch

a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for n in (1, 2, 4):
    start.record()
    for _ in range(n):
        a @ a
    with torch.cuda.stream(side):
        a @ a
    end.record()
    end.synchronize()
    print(f"mm x{n}: {start.elapsed_time(end):.9f} ms")
