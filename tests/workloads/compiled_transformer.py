"""A pre-norm transformer block (causal SDPA attention, GELU MLP) in bf16 autocast, compiled with torch.compile."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


model = nn.Sequential(Block(), Block(), nn.LayerNorm(256)).cuda()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), fused=True)
for _ in range(2):
    x = torch.randn(8, 128, 256, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
