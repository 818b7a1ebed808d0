"""MLP in fp16 autocast with GradScaler, gradient clipping and foreach AdamW."""

import torch
import torch.nn as nn

m = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(m.parameters(), foreach=True)
scaler = torch.amp.GradScaler("cuda")
for _i in range(3):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = m(torch.randn(64, 512, device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print("ok", loss.item())
