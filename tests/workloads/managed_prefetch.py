"""Managed memory prefetched through the CUDA runtime, as bitsandbytes' paged optimizers do (ctypes on the runtime
torch links): a prefetch of an allocation to the device (prints `prefetch CODE`), one past its end (`outside CODE`),
then `cudaMemAdvise`, a runtime function torch does not reference and the emulator does not implement
(`advise CODE`)."""

import ctypes

import torch

major = int(torch.version.cuda.split(".")[0])
rt = ctypes.CDLL(f"libcudart.so.{major}")
torch.cuda.init()


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


DEVICE = Location(1, 0)  # cudaMemLocationTypeDevice, device 0
ptr, size = ctypes.c_void_p(), 1 << 20
assert rt.cudaMallocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1) == 0  # cudaMemAttachGlobal


def prefetch(address: int, count: int) -> int:
    if major >= 13:
        return rt.cudaMemPrefetchAsync(ctypes.c_void_p(address), ctypes.c_size_t(count), DEVICE, 0, None)
    return rt.cudaMemPrefetchAsync(ctypes.c_void_p(address), ctypes.c_size_t(count), 0, None)


print("prefetch", prefetch(ptr.value, size))
print("outside", prefetch(ptr.value + size // 2, size))
advise = (DEVICE, 0) if major >= 13 else (0,)
print("advise", rt.cudaMemAdvise(ptr, ctypes.c_size_t(size), 1, *advise))  # cudaMemAdviseSetReadMostly
