"""The capture format: what the native stubs write and the Python side reads, defined once here.

The C side is `native/maya_emu.h` (the call record `maya_rec`, its kinds, flags and domains, the element
types) and `native/ops_observer.cpp` (the op record); tests/emulator/test_capture_format.py checks every
value and the record layouts against them, with no compiler. `convert.py` reads captures with these,
`build.py` generates the loud stubs with them, and `runner.py` names the ranges it opens with them
(the evaluation range's name, `EVAL_RANGE`, and the module range's prefix are the trace spec's:
maya_trace_spec.vocabulary).
"""

from __future__ import annotations

import numpy as np

from maya_trace_spec.vocabulary import MODULE_RANGE_PREFIX

RECORD_DTYPE = np.dtype(
    [
        ("seq", "<i8"),
        ("tid", "<i8"),
        ("start_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("stream", "<i8"),
        ("api", "<i4"),
        ("domain", "<i4"),
        ("status", "<i4"),
        ("device", "<i4"),
        ("kind", "<i4"),
        ("flags", "<i4"),
        ("a", "<i8", (8,)),
        ("op", "<i8"),
        ("cpu_ns", "<i8"),
        ("cpu_dur_ns", "<i8"),
    ]
)
"""One intercepted call: `maya_rec` of maya_emu.h (152 bytes), written to `calls-<tid>.bin`."""
OP_RECORD_DTYPE = np.dtype(
    [
        ("op_id", "<i8"),
        ("parent", "<i8"),
        ("t_ns", "<i8"),
        ("end_ns", "<i8"),
        ("seq_nr", "<i8"),
        ("iteration", "<i4"),
        ("name_id", "<i4"),
        ("inputs_id", "<i4"),
        ("kind", "i1"),
        ("scope", "i1"),
        ("flags", "<i2"),
    ]
)
"""One framework op entered or left: `OpRecord` of ops_observer.cpp (56 bytes), written to `ops-<tid>.bin`."""

CHILD_REPORT_DTYPE = np.dtype(
    [
        ("pid", "<i8"),
        ("rank_pid", "<i8"),
        ("parent_pid", "<i8"),
        ("calls", "<i8"),
        ("device_calls", "<i8"),
        ("forked", "<i4"),
        ("first_domain", "<i4"),
        ("first_api", "S128"),
        ("first_device_api", "S128"),
        ("command", "S1024"),
    ]
)
"""What a process the rank started asked of the stubs, counted: `maya_child_report` of maya_emu.h (1328 bytes),
written to `children/<pid>.bin` or `<pid>-<n>.bin` (child_processes.py reads it)."""

# Record kinds (maya_emu.h `K_*`): what a call record's payload `a[8]` holds.
K_PLAIN, K_LAUNCH, K_GEMM, K_COPY, K_MEMSET, K_COLL, K_EVENT, K_ALLOC, K_SYNC, K_ATTN = range(10)
# Record flags (maya_emu.h `F_*`).
F_DATA_DEPENDENT, F_UNIMPLEMENTED, F_GRAPH_REPLAY = 1, 2, 4
# API domains (maya_emu.h `D_*`), the index into DOMAINS.
D_RUNTIME, D_DRIVER, D_CUBLAS, D_CUBLASLT, D_CUDNN, D_NCCL, D_OTHER, D_NVML = range(8)
DOMAINS = np.array(["runtime", "driver", "cublas", "cublaslt", "cudnn", "nccl", "other", "nvml"])
"""`api_calls.domain` by `D_*`."""
DTYPES = np.array(
    [None, "fp32", "fp16", "bf16", "fp64", "tf32", "int8", "int32", "fp8e4m3", "fp8e5m2", "int64", "uint8"],
    dtype=object,
)
"""Element type names by maya_emu.h's `T_*` (T_UNKNOWN = 0 is None)."""
MEMCPY_KINDS = np.array(["HtoH", "HtoD", "DtoH", "DtoD", "default", "PtoP"], dtype=object)
"""A K_COPY record's a1 (cudaMemcpyKind)."""
STAND_INS = {1: "zero", 2: "one", 3: "computed", 4: "routed", 5: "unknown"}
"""a[3] of a host read (host_read.c): a value Maya chose to end a loop (zero, one), a value it computed on the
host from values it knew (host_values.cpp), from real inputs or from an assumed routing, or a value only a GPU
computes, read as 0 (unknown)."""
ATTENTION_KERNELS = ("cudnn_sdpa_fwd", "cudnn_sdpa_bwd")
"""Kernel names of a K_ATTN record (forward, backward): named by Maya, as cuDNN hides its kernels."""

# Op records (ops_observer.cpp).
OP_ENTER, OP_EXIT = 0, 1
SCOPE_BACKWARD_FUNCTION = 1  # at::RecordScope
OP_FLAG_AUTOGRAD_THREAD = 1

MODULE_PREFIX = MODULE_RANGE_PREFIX
"""Name prefix of the range the runner opens around each module's forward (`nn.Module: GPT.blocks.0`)."""
NOTES_FILE = "triton_launches.jsonl"
"""In a rank's capture: the runner's descriptions of Triton launches, one JSON object a line (triton_launches.py)."""

# What an API a stub library does not emulate returns: each library's own "not supported" code.
CUDA_ERROR_NOT_SUPPORTED = 801  # cudaErrorNotSupported and CUDA_ERROR_NOT_SUPPORTED
CUBLAS_STATUS_NOT_SUPPORTED = 15
CUDNN_STATUS_NOT_SUPPORTED = 3000
NCCL_INVALID_USAGE = 5  # ncclInvalidUsage
CUSPARSE_STATUS_NOT_SUPPORTED = 10
CUFFT_NOT_SUPPORTED = 16
CUSOLVER_STATUS_NOT_SUPPORTED = 7
NVRTC_ERROR_INTERNAL_ERROR = 11
CUPTI_ERROR_NOT_SUPPORTED = 27
CU_FILE_DRIVER_NOT_INITIALIZED = 5001
NVSHMEM_ERROR = 1
NVML_ERROR_NOT_SUPPORTED = 3
CURAND_STATUS_ARCH_MISMATCH = 204
