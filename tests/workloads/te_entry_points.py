"""Entry points Transformer Engine's core reaches, called as it calls them (through the preloaded stubs):
the driver's `cuDevicePrimaryCtxRelease` looked up by name through the runtime (its NVRTC kernels do), and
`cudaOccupancyMaxActiveClusters` (its CUTLASS grouped GEMM). Prints one `name value` line per answer."""

import ctypes

import torch

torch.cuda.init()
process = ctypes.CDLL(None)  # the preloaded stubs are in the global namespace


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("val", ctypes.c_uint * 16)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", Dim3),
        ("block", Dim3),
        ("smem", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


fn, status = ctypes.c_void_p(), ctypes.c_int()
lookup = process.cudaGetDriverEntryPointByVersion
lookup.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_void_p]
print("lookup", lookup(b"cuDevicePrimaryCtxRelease", ctypes.byref(fn), 12000, 0, ctypes.byref(status)), status.value)
release = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(fn.value)
print("cuDevicePrimaryCtxRelease", release(0))

clusters = process.cudaOccupancyMaxActiveClusters
clusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(LaunchConfig)]
for cluster, block, smem in [(1, 128, 0), (2, 128, 0), (2, 256, 100 * 1024), (32, 128, 0)]:
    attr = LaunchAttribute(id=4)  # cudaLaunchAttributeClusterDimension
    attr.val[0], attr.val[1], attr.val[2] = cluster, 1, 1
    config = LaunchConfig(Dim3(132, 1, 1), Dim3(block, 1, 1), smem, None, ctypes.pointer(attr), 1)
    n = ctypes.c_int(-1)
    err = clusters(ctypes.byref(n), None, ctypes.byref(config))
    print(f"clusters {cluster} {block} {smem} {err} {n.value}")
