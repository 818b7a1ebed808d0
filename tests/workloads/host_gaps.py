"""Two loops on a virtual GPU for the framework-time measurement: `cudaMemsetAsync` called back to back from a
loop that does nothing else (ctypes straight into the runtime: no framework between the calls), then eager
`add_` (ATen's dispatch between the launches)."""

import ctypes
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
x = torch.zeros(1024, device="cuda")
memset = ctypes.CDLL("libcudart.so.13").cudaMemsetAsync
memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
pointer = x.data_ptr()
for _ in range(n):
    memset(pointer, 0, 4096, None)
with torch.no_grad():
    for _ in range(n):
        x.add_(1)
torch.cuda.synchronize()
