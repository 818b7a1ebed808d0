"""An MLP compiled with torch.compile (Inductor + Triton kernels)."""

import torch
import torch.nn as nn

m = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
cm = torch.compile(m)
opt = torch.optim.AdamW(m.parameters(), fused=True)
for _i in range(2):
    cm(torch.randn(32, 256, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
print("ok")
