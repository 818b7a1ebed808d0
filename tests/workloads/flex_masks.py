"""Compiled flex attention over two block masks built outside `torch.compile` (their block counts are values the
emulator computes on the host): causal and a 128-token sliding window, 512 queries (4 blocks of 128), forward
and backward; then, with expandable segments, the device pointer Inductor's static launcher asks the driver for."""

import ctypes
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402 - the allocator's configuration is read at torch's first allocation
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

SEQ, WINDOW = 512, 128


def causal(b, h, q, kv):
    return q >= kv


def sliding(b, h, q, kv):
    return (q >= kv) & (q - kv < WINDOW)


attend = torch.compile(flex_attention)
for mask_mod in (causal, sliding):
    mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=SEQ, KV_LEN=SEQ, device="cuda")
    q, k, v = (torch.randn(1, 2, SEQ, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attend(q, k, v, block_mask=mask).sum().backward()
torch.cuda.synchronize()

x = torch.empty(1 << 20, device="cuda")
pointer = ctypes.c_uint64()
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
status = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute(
    ctypes.byref(pointer), CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ctypes.c_uint64(x.data_ptr())
)
print(f"device pointer status {status} same {pointer.value == x.data_ptr()}")
