"""Ops torch compiles at their first use with NVRTC (its jiterator): `special.airy_ai` and
`special.bessel_j0`, then one NVRTC entry point the emulator does not implement, called directly."""

import ctypes

import torch

x = torch.randn(4096, device="cuda")
y = torch.special.airy_ai(x) + torch.special.bessel_j0(x)
print("jiterated", tuple(y.shape))
size = ctypes.c_size_t()
print("nvrtcGetPCHHeapSize returned", ctypes.CDLL("libnvrtc.so.13").nvrtcGetPCHHeapSize(ctypes.byref(size)))
