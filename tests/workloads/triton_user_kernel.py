"""A user Triton kernel (fused scaled add) called eagerly, and one autotuned with @triton.autotune."""

import torch
import triton
import triton.language as tl


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + alpha * y, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 1), (1024, 4), (4096, 8))], key=["n"]
)
@triton.jit
def tuned_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


n = 1 << 20
x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(n, device="cuda", dtype=torch.bfloat16)
out = torch.empty_like(x)
for _ in range(2):
    scaled_add[(triton.cdiv(n, 1024),)](x, y, out, n, 0.5, BLOCK=1024)
    tuned_scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
torch.cuda.synchronize()
print("best config", tuned_scale.best_config)
