"""A Triton kernel that takes host-built TMA descriptors (`TensorDescriptor`) by value: Triton's launcher encodes
each with cuTensorMapEncodeTiled before the launch."""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def copy_tiles(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([m, n], in_desc.load([m, n]))


x = torch.empty(1024, 2048, dtype=torch.bfloat16, device="cuda")
y = torch.empty_like(x)
copy_tiles[(1024 // 64, 2048 // 64)](
    TensorDescriptor.from_tensor(x, [64, 64]), TensorDescriptor.from_tensor(y, [64, 64]), BM=64, BN=64
)
torch.cuda.synchronize()
print("triton tma ok", flush=True)
