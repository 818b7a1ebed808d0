"""Data movement: copy kernels (casts, transposes), memcpy between host and device, memsets."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from maya_trace_spec.vocabulary import DTYPE_BYTES

from ..configs import KernelConfig
from .inputs import TORCH_DTYPES, Call, Inputs, Unsupported, forward_call


def copy_cast(c: KernelConfig, x: Inputs) -> Call:
    dst = TORCH_DTYPES[str(c.shape["dst_dtype"])]
    return forward_call(lambda t: t.to(dst), [(t,) for t in x.normal(c.shape["tokens"], c.shape["hidden"])])


def copy_transpose(c: KernelConfig, x: Inputs) -> Call:
    return forward_call(lambda t: t.t().contiguous(), [(t,) for t in x.normal(c.shape["tokens"], c.shape["hidden"])])


def _require_cuda(x: Inputs) -> None:
    if x.device.type != "cuda":
        raise Unsupported("needs a CUDA device")


def _host_copies(device_buffers: list[torch.Tensor], pinned: bool) -> list[torch.Tensor]:
    return [torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned).copy_(t) for t in device_buffers]


def memcpy_h2d(c: KernelConfig, x: Inputs) -> Call:
    _require_cuda(x)
    dst = x.raw_bytes(c.shape["bytes"])
    src = _host_copies(dst, bool(c.shape["pinned"]))
    return lambda i: dst[i].copy_(src[i], non_blocking=True)


def memcpy_d2h(c: KernelConfig, x: Inputs) -> Call:
    _require_cuda(x)
    src = x.raw_bytes(c.shape["bytes"])
    dst = _host_copies(src, bool(c.shape["pinned"]))
    return lambda i: dst[i].copy_(src[i], non_blocking=True)


def memcpy_d2d(c: KernelConfig, x: Inputs) -> Call:
    """A same-dtype contiguous device copy: torch issues it as cudaMemcpyAsync (DtoD)."""
    _require_cuda(x)
    src, dst = x.raw_bytes(c.shape["bytes"]), x.raw_bytes(c.shape["bytes"])
    return lambda i: dst[i].copy_(src[i])


def fill_zero(c: KernelConfig, x: Inputs) -> Call:
    """`Tensor.zero_()`, which torch runs as a fill kernel."""
    buffers = x.normal(c.shape["bytes"] // DTYPE_BYTES[c.dtype])
    return lambda i: buffers[i].zero_()


@functools.lru_cache(maxsize=1)
def _cudart() -> ctypes.CDLL:
    """The CUDA runtime library torch has loaded (found in this process's memory map)."""
    torch.cuda.init()
    maps = Path("/proc/self/maps")
    paths = (
        {line.split()[-1] for line in maps.read_text().splitlines() if "libcudart" in line} if maps.exists() else set()
    )
    if not paths:
        raise Unsupported("the CUDA runtime library torch uses was not found in /proc/self/maps")
    lib = ctypes.CDLL(sorted(paths)[0])
    lib.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    lib.cudaMemsetAsync.restype = ctypes.c_int
    return lib


def cuda_memset(c: KernelConfig, x: Inputs) -> Call:
    """cudaMemsetAsync on torch's current stream (what cuBLAS, NCCL and some aten ops issue)."""
    _require_cuda(x)
    memset = _cudart().cudaMemsetAsync
    size = c.shape["bytes"]
    buffers = x.raw_bytes(size)
    stream = torch.cuda.current_stream(x.device).cuda_stream

    def call(i: int) -> None:
        status = memset(buffers[i].data_ptr(), 0, size, stream)
        if status != 0:
            raise RuntimeError(f"CUDA error: cudaMemsetAsync returned {status}")

    return call


BUILDERS = {
    f.__name__: f for f in (copy_cast, copy_transpose, memcpy_h2d, memcpy_d2h, memcpy_d2d, fill_zero, cuda_memset)
}
