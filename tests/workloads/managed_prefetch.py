"""Managed memory prefetched through the CUDA runtime, as bitsandbytes' paged optimizers do (ctypes on the runtime
torch links). Prints `NAME CODE` for each prefetch: of a managed allocation to device 0 (`device`) and to the host
(`host`); then the ones the runtime refuses: one past the allocation's end (`outside`), to a device the job lacks
(`device7`) or a negative one (`device-2`), to an undocumented location type (`type99`, CUDA 13), with flags
(`flags5`, CUDA 13), of memory from `cudaMalloc` (`unmanaged`). Then `cudaMemAdvise`, a runtime function torch does
not reference and the emulator does not implement (`advise CODE`)."""

import ctypes

import torch

major = int(torch.version.cuda.split(".")[0])
rt = ctypes.CDLL(f"libcudart.so.{major}")
torch.cuda.init()

DEVICE, HOST = 1, 2  # cudaMemLocationType
CPU_DEVICE_ID = -1  # cudaCpuDeviceId


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


size = 1 << 20
managed, plain = ctypes.c_void_p(), ctypes.c_void_p()
assert rt.cudaMallocManaged(ctypes.byref(managed), ctypes.c_size_t(size), 1) == 0  # cudaMemAttachGlobal
assert rt.cudaMalloc(ctypes.byref(plain), ctypes.c_size_t(size)) == 0


def prefetch(address: int, count: int = size, kind: int = DEVICE, device: int = 0, flags: int = 0) -> int:
    if major >= 13:
        location = Location(kind, device)
        return rt.cudaMemPrefetchAsync(ctypes.c_void_p(address), ctypes.c_size_t(count), location, flags, None)
    device = CPU_DEVICE_ID if kind == HOST else device
    return rt.cudaMemPrefetchAsync(ctypes.c_void_p(address), ctypes.c_size_t(count), device, None)


print("device", prefetch(managed.value))
print("host", prefetch(managed.value, kind=HOST))
print("outside", prefetch(managed.value + size // 2))
print("device7", prefetch(managed.value, device=7))
print("device-2", prefetch(managed.value, device=-2))
if major >= 13:
    print("type99", prefetch(managed.value, kind=99))
    print("flags5", prefetch(managed.value, flags=5))
print("unmanaged", prefetch(plain.value))
advise = (Location(DEVICE, 0), 0) if major >= 13 else (0,)
print("advise", rt.cudaMemAdvise(managed, ctypes.c_size_t(size), 1, *advise))  # cudaMemAdviseSetReadMostly
