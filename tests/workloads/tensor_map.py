"""TMA descriptors through the driver API, as Triton's launcher and CUTLASS build them: one valid
cuTensorMapEncodeTiled for a bf16 (256, 512) tensor (prints the map's quad-words), then
calls that break one documented requirement each (prints `case code`)."""

import ctypes

import torch

u64, u32 = ctypes.c_uint64, ctypes.c_uint32


class TensorMap(ctypes.Structure):
    _fields_ = [("opaque", u64 * 16)]
    _align_ = 128


cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuTensorMapEncodeTiled.argtypes = [
    ctypes.c_void_p,
    ctypes.c_int,
    u32,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
]
BF16, UINT8 = 9, 0
t = torch.empty(256, 512, dtype=torch.bfloat16, device="cuda")
buf = ctypes.create_string_buffer(128 + 256)
map_addr = (ctypes.addressof(buf) + 127) // 128 * 128


def encode(
    dtype=BF16,
    rank=2,
    address=t.data_ptr(),
    dims=(512, 256),
    strides=(1024,),
    box=(64, 128),
    elem=(1, 1),
    interleave=0,
    swizzle=3,
    l2=2,
    oob=0,
    tensor_map=map_addr,
):
    def arr(ty, xs):
        return (ty * max(len(xs), 1))(*xs)

    return cuda.cuTensorMapEncodeTiled(
        tensor_map,
        dtype,
        rank,
        address,
        arr(u64, dims),
        arr(u64, strides),
        arr(u32, box),
        arr(u32, elem),
        interleave,
        swizzle,
        l2,
        oob,
    )


print("valid", encode(), flush=True)
print("map", *TensorMap.from_address(map_addr).opaque, flush=True)
cases = {
    "rank0": dict(rank=0, dims=(), strides=(), box=(), elem=()),
    "rank6": dict(rank=6, dims=(2,) * 6, strides=(16,) * 5, box=(8,) * 6, elem=(1,) * 6),
    "misaligned_address": dict(address=t.data_ptr() + 8),
    "interleave32_address": dict(
        rank=3,
        dims=(512, 16, 16),
        strides=(1024, 16384),
        box=(16, 16, 16),
        elem=(1, 1, 1),
        interleave=2,
        swizzle=1,
        address=t.data_ptr() + 16,
    ),
    "stride_not_16": dict(strides=(1000,)),
    "stride_2_40": dict(strides=(1 << 40,)),
    "box_0": dict(box=(64, 0)),
    "box_257": dict(box=(64, 257)),
    "elem_stride_9": dict(elem=(1, 9)),
    "dtype_16": dict(dtype=16),
    "swizzle_7": dict(swizzle=7),
    "interleave_3": dict(interleave=3),
    "l2_4": dict(l2=4),
    "oob_2": dict(oob=2),
    "oob_nan_integer": dict(dtype=UINT8, box=(128, 128), oob=1),
    "box_exceeds_swizzle": dict(box=(128, 128)),
    "map_misaligned": dict(tensor_map=map_addr + 32),
}
for name, kw in cases.items():
    print("case", name, encode(**kw), flush=True)
