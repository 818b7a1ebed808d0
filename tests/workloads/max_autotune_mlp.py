"""A bf16 MLP compiled with max-autotune: Inductor times Triton GEMM templates against cuBLAS and keeps the
fastest (the choice printed in its AUTOTUNE tables and launched in the training steps)."""

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda().bfloat16()
compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
opt = torch.optim.AdamW(model.parameters(), fused=True)
for _ in range(3):
    compiled(torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
print("ok")
