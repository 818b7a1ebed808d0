"""flash-attn's attention calls, forward and backward, as a training script makes them: `flash_attn_func` (causal),
`flash_attn_varlen_func` over `SEQUENCES` packed sequences, `flash_attn_qkvpacked_func` with dropout. Prints what
each returned and the gradients' shapes as JSON. `--compile`: the attention under `torch.compile` (flash-attn's ops
are `torch.library` custom ops with fake functions). Needs flash-attn's Python code (`maya.installer.flash_attn`)."""

import json
import sys

import torch
from flash_attn import flash_attn_func, flash_attn_qkvpacked_func, flash_attn_varlen_func

BATCH, SEQ, HEADS, HEAD_DIM = 2, 256, 4, 64
SEQUENCES = (96, 160, 256)  # packed: 512 tokens, mean length 512 / 3

w = torch.nn.Linear(HEADS * HEAD_DIM, 3 * HEADS * HEAD_DIM, device="cuda", dtype=torch.bfloat16)
x = torch.randn(BATCH, SEQ, HEADS * HEAD_DIM, device="cuda", dtype=torch.bfloat16)
bounds = torch.tensor([0, *torch.tensor(SEQUENCES).cumsum(0).tolist()], device="cuda", dtype=torch.int32)


def attend(qkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
    q, k, v = qkv.unbind(2)
    dense = flash_attn_func(q, k, v, causal=True)
    flat = [t.reshape(BATCH * SEQ, HEADS, HEAD_DIM) for t in (q, k, v)]
    packed = flash_attn_varlen_func(*flat, bounds, bounds, max(SEQUENCES), max(SEQUENCES), causal=True)
    dropped = flash_attn_qkvpacked_func(qkv, dropout_p=0.1)
    return dense, packed, dropped


if "--compile" in sys.argv:
    attend = torch.compile(attend)
for _ in range(2):
    dense, packed, dropped = attend(w(x).view(BATCH, SEQ, 3, HEADS, HEAD_DIM))
    (dense.float().sum() + packed.float().sum() + dropped.float().sum()).backward()
print(json.dumps({"outputs": [list(t.shape) for t in (dense, packed, dropped)], "grad": list(w.weight.grad.shape)}))
