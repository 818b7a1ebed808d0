"""Causal flex attention (torch.nn.attention.flex_attention), compiled: Inductor's flex-attention templates."""

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q, kv):
    return q >= kv


attend = torch.compile(flex_attention)
mask = create_block_mask(causal, B=None, H=None, Q_LEN=256, KV_LEN=256, device="cuda")
for _ in range(2):
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attend(q, k, v, block_mask=mask).sum().backward()
torch.cuda.synchronize()
print("ok")
