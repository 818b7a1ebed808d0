"""An MLP trained in float8 with torchao (`convert_to_float8_training`: dynamic tensorwise scaling, the
recipe torchtitan's float8 configuration uses): its GEMMs run `torch._scaled_mm` on fp8 operands, with amax,
scale and cast kernels around each."""
import torch
import torch.nn as nn
from torchao.float8 import convert_to_float8_training

model = nn.Sequential(nn.Linear(1024, 4096, bias=False), nn.GELU(), nn.Linear(4096, 1024, bias=False))
model = model.cuda().bfloat16()
convert_to_float8_training(model)
opt = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
for step in range(3):
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained in float8")
