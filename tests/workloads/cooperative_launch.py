"""A kernel launched through the driver API as a cooperative grid (`cuLaunchCooperativeKernel`, as Transformer
Engine launches its NVRTC-compiled multi-block LayerNorm for wide rows), between two eager ops. Prints the driver's
status of the launch."""

import ctypes

import torch

x = torch.ones(1024, device="cuda")
cuda = ctypes.CDLL("libcuda.so.1")
module, function = ctypes.c_void_p(), ctypes.c_void_p()
assert cuda.cuModuleLoadData(ctypes.byref(module), b"// ptx of ln_fwd_general_kernel\n") == 0
assert cuda.cuModuleGetFunction(ctypes.byref(function), module, b"ln_fwd_general_kernel") == 0
launch = cuda.cuLaunchCooperativeKernel
launch.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p]
status = launch(function, 12, 4, 1, 128, 1, 1, 4096, torch.cuda.current_stream().cuda_stream, None)
x.add_(1)
torch.cuda.synchronize()
print(f"cooperative launch {status}")
