"""An MLP trained with float8 GEMMs as torchao's dynamic tensorwise recipe runs them (torchtitan's float8
configuration), written in plain PyTorch: per GEMM operand an amax (`abs().max()`), a scale
(`448 / amax`, e4m3 for inputs and weights, `57344 / amax` and e5m2 for gradients), a cast, then
`torch._scaled_mm` with the inverse scales, for the forward and both backward GEMMs."""

import torch
import torch.nn as nn

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_float8(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().max().float().clamp(min=1e-12)
    scale = torch.finfo(dtype).max / amax
    return (x.float() * scale).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype), scale.reciprocal()


def fp8_mm(a: torch.Tensor, b: torch.Tensor, da: torch.dtype, db: torch.dtype) -> torch.Tensor:
    """a @ b in float8: a row-major, b column-major, as cuBLASLt wants them."""
    a8, sa = to_float8(a, da)
    b8, sb = to_float8(b.t().contiguous(), db)
    return torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


class Float8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return fp8_mm(x, w.t(), E4M3, E4M3)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad_x = fp8_mm(grad, w, E5M2, E4M3)
        grad_w = fp8_mm(grad.t().contiguous(), x, E5M2, E4M3)
        return grad_x, grad_w


class Float8Linear(nn.Linear):
    def forward(self, x):
        return Float8Matmul.apply(x, self.weight)


model = nn.Sequential(Float8Linear(1024, 4096, bias=False), nn.GELU(), Float8Linear(4096, 1024, bias=False))
model = model.cuda().bfloat16()
opt = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
for _step in range(3):
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained with float8 GEMMs")
