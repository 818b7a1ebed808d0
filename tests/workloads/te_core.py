"""Transformer Engine's core library (libtransformer_engine.so, the transformer-engine-cu13 wheel) called through its
C API, as its PyTorch extension calls it for a `te.Linear`: a bf16 GEMM and an fp8 one (nvte_cublas_gemm, cuBLASLt)
and a LayerNorm (nvte_layernorm_fwd, TE's own kernel, compiled by NVRTC). Prints `te core ok` at the end."""

import ctypes

import torch
import transformer_engine.common as te_common

lib = te_common._TE_LIB_CTYPES
BYTE, FLOAT32, BF16 = 0, 4, 6


class Shape(ctypes.Structure):
    _fields_ = [("data", ctypes.c_size_t * 15), ("ndim", ctypes.c_size_t)]


class BasicTensor(ctypes.Structure):
    _fields_ = [("data_ptr", ctypes.c_void_p), ("dtype", ctypes.c_int), ("shape", Shape)]


lib.nvte_create_tensor.restype = ctypes.c_void_p
lib.nvte_create_tensor.argtypes = [ctypes.c_int]
lib.nvte_set_tensor_param_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]


def nvte(t: torch.Tensor | None, dtype: int = BF16) -> ctypes.c_void_p:
    """A TE tensor wrapping `t`'s memory (row-wise data), or an empty one."""
    handle = lib.nvte_create_tensor(0)  # NVTE_DELAYED_TENSOR_SCALING
    if t is not None:
        shape = Shape((ctypes.c_size_t * 15)(*t.shape), t.dim())
        basic = BasicTensor(t.data_ptr(), dtype, shape)
        lib.nvte_set_tensor_param_v2(handle, 0, ctypes.byref(basic), ctypes.sizeof(basic))  # kNVTERowwiseData
    return ctypes.c_void_p(handle)


tokens, k, n = 2048, 1024, 4096
x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
y = torch.empty(tokens, n, device="cuda", dtype=torch.bfloat16)
workspace = torch.empty(32 << 20, device="cuda", dtype=torch.uint8)
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
sms = torch.cuda.get_device_properties(0).multi_processor_count
# y = x @ w.T: TE's "TN" layout, the weight as A (transposed), the input as B
lib.nvte_cublas_gemm.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_bool] * 3 + [ctypes.c_void_p]
lib.nvte_cublas_gemm.argtypes += [ctypes.c_bool, ctypes.c_bool, ctypes.c_int, ctypes.c_void_p]


def gemm(a: ctypes.c_void_p, b: ctypes.c_void_p) -> None:
    """y = b @ a.T in TE's "TN" layout (the weight `a` transposed), bf16 out, no bias, no accumulation."""
    lib.nvte_cublas_gemm(
        a, b, nvte(y), nvte(None), nvte(None), True, False, False, nvte(workspace, BYTE), False, False, 0, stream
    )


gemm(nvte(w), nvte(x))

# the same GEMM in fp8 (E4M3 operands, each with its inverse scale, as delayed scaling quantizes them), bf16 out
FP8E4M3, ROWWISE_SCALE_INV = 7, 4


def fp8(t: torch.Tensor) -> ctypes.c_void_p:
    """A TE fp8 tensor: `t`'s bytes as E4M3 data and a one-element fp32 inverse scale."""
    handle = nvte(t, FP8E4M3)
    scale_inv = torch.ones(1, device="cuda", dtype=torch.float32)
    keep.append(scale_inv)
    basic = BasicTensor(scale_inv.data_ptr(), FLOAT32, Shape((ctypes.c_size_t * 15)(1), 1))
    lib.nvte_set_tensor_param_v2(handle, ROWWISE_SCALE_INV, ctypes.byref(basic), ctypes.sizeof(basic))
    return handle


keep = []
x8 = torch.empty(tokens, k, device="cuda", dtype=torch.uint8)
w8 = torch.empty(n, k, device="cuda", dtype=torch.uint8)
gemm(fp8(w8), fp8(x8))

gamma = torch.ones(k, device="cuda", dtype=torch.bfloat16)
beta = torch.zeros(k, device="cuda", dtype=torch.bfloat16)
z = torch.empty_like(x)
mu = torch.empty(tokens, device="cuda", dtype=torch.float32)
rsigma = torch.empty(tokens, device="cuda", dtype=torch.float32)
lib.nvte_layernorm_fwd.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float] + [ctypes.c_void_p] * 4
lib.nvte_layernorm_fwd.argtypes += [ctypes.c_int, ctypes.c_bool, ctypes.c_void_p]
lib.nvte_tensor_shape.restype = Shape
lib.nvte_tensor_shape.argtypes = [ctypes.c_void_p]
lib.nvte_tensor_type.argtypes = [ctypes.c_void_p]
args = (nvte(x), nvte(gamma), nvte(beta), 1e-5, nvte(z), nvte(mu, FLOAT32), nvte(rsigma, FLOAT32))
query = nvte(None)
lib.nvte_layernorm_fwd(*args, query, sms, False, stream)  # an empty workspace: TE sets the size it needs
shape = lib.nvte_tensor_shape(query)
elements = 1
for d in shape.data[: shape.ndim]:
    elements *= d
ws_dtype = lib.nvte_tensor_type(query)
ws = torch.empty(elements * (4 if ws_dtype == FLOAT32 else 1), device="cuda", dtype=torch.uint8)
ws_tensor = lib.nvte_create_tensor(0)
basic = BasicTensor(ws.data_ptr(), ws_dtype, shape)
lib.nvte_set_tensor_param_v2(ws_tensor, 0, ctypes.byref(basic), ctypes.sizeof(basic))
print("layernorm workspace", list(shape.data[: shape.ndim]), ws_dtype)
lib.nvte_layernorm_fwd(*args, ctypes.c_void_p(ws_tensor), sms, False, stream)
torch.cuda.synchronize()
print("te core ok")
