"""Synthetic but well-formed runs shaped like a data-parallel training step (for tests, demos of the
format and benchmarks). Every table is filled and every reference resolves."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from .columns import SPEC_VERSION
from .writer import RunWriter

KERNEL_NAMES = [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm", "cublas"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "elementwise", "torch"),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
        "normalization",
        "torch",
    ),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>", "softmax", "torch"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction", "torch"),
    ("void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>", "embedding", "torch"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer", "torch"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "collective", "nccl"),
]
# api id -> (api, domain); column fill depends on it
_APIS = [
    ("cudaLaunchKernel", "runtime"),
    ("cublasLtMatmul", "cublaslt"),
    ("cudaMemcpyAsync", "runtime"),
    ("ncclAllReduce", "nccl"),
    ("cudaEventRecord", "runtime"),
]
_API_P = [0.70, 0.15, 0.05, 0.05, 0.05]


def api_calls(n: int, *, seed: int = 0, n_ops: int = 1, t0: int = 0) -> pa.Table:
    """`n` api_calls rows (without `rank`), vectorised so that millions of rows take well under a second."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(len(_APIS), size=n, p=_API_P)
    api = pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)), pa.array([a for a, _ in _APIS])).cast(
        pa.string()
    )
    domain = pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)), pa.array([d for _, d in _APIS])).cast(
        pa.string()
    )
    launch = (kind == 0) | (kind == 1)
    gemm = kind == 1
    copy = kind == 2
    coll = kind == 3
    dur = rng.integers(1_000, 8_000, size=n)
    start = t0 + np.cumsum(dur + rng.integers(200, 2_000, size=n))
    kernel = np.where(gemm, 0, rng.integers(1, len(KERNEL_NAMES) - 1, size=n))
    kernel = np.where(coll, len(KERNEL_NAMES) - 1, kernel)

    def masked(values, mask, type_=pa.int64()):
        return pa.array(values, type=type_, mask=~mask)

    dims = rng.choice([512, 1024, 2048, 4096, 8192, 11008], size=(n, 3))
    return pa.table(
        {
            "seq": pa.array(np.arange(n, dtype=np.int64)),
            "thread_id": pa.array(np.full(n, 1000 + seed, dtype=np.int64)),
            "api": api,
            "domain": domain,
            "status": pa.array(np.zeros(n, dtype=np.int32)),
            "start_ns": pa.array(start.astype(np.int64)),
            "duration_ns": pa.array(dur.astype(np.int64)),
            "time_source": pa.array(np.full(n, "emulated")),
            "correlation_id": pa.array(np.arange(1, n + 1, dtype=np.int64)),
            "op_id": pa.array(rng.integers(0, max(n_ops, 1), size=n).astype(np.int64)),
            "device": pa.array(np.zeros(n, dtype=np.int32)),
            "stream_id": masked(np.where(coll, 13, 7), kind != 4),
            "kernel_id": masked(kernel, launch | coll),
            "grid_x": masked(rng.integers(1, 4096, size=n), launch, pa.int32()),
            "grid_y": masked(np.ones(n), launch, pa.int32()),
            "grid_z": masked(np.ones(n), launch, pa.int32()),
            "block_x": masked(rng.choice([128, 256, 512], size=n), launch, pa.int32()),
            "block_y": masked(np.ones(n), launch, pa.int32()),
            "block_z": masked(np.ones(n), launch, pa.int32()),
            "shared_mem_bytes": masked(np.where(gemm, 232_448, 0), launch, pa.int32()),
            "gemm_m": masked(dims[:, 0], gemm),
            "gemm_n": masked(dims[:, 1], gemm),
            "gemm_k": masked(dims[:, 2], gemm),
            "gemm_batch": masked(np.ones(n), gemm),
            "gemm_dtype_a": pa.array(np.where(gemm, "bf16", None)),
            "bytes": masked(rng.integers(4, 1 << 26, size=n), copy),
            "memcpy_kind": pa.array(np.where(copy, "DtoD", None)),
            "comm_id": pa.array(np.where(coll, "c0", None)),
            "collective_name": pa.array(np.where(coll, "allreduce", None)),
            "in_msg_nelems": masked(rng.integers(1 << 10, 1 << 26, size=n), coll),
            "comm_seq": masked(np.cumsum(coll) - 1, coll),
            "event_id": masked(np.full(n, 5), kind == 4),
        }
    )


def write_run(
    run_dir: str | Path, *, world_size: int = 2, calls_per_rank: int = 1000, ops_per_rank: int = 100, seed: int = 0
) -> Path:
    """Write a complete synthetic run of `world_size` ranks."""
    w = RunWriter(run_dir)
    w.write(
        "run",
        {
            "run_id": [uuid.uuid4().hex],
            "created_at_ns": [time.time_ns()],
            "source": ["synthetic"],
            "status": ["complete"],
            "command": [json.dumps(["python", "train.py"])],
            "hardware": ["h100-sxm"],
            "world_size": [world_size],
            "nnodes": [1],
            "nproc_per_node": [world_size],
            "producer_version": [f"maya_trace_spec {SPEC_VERSION}"],
        },
    )
    for rank in range(world_size):
        w.write(
            "devices",
            {
                "local_rank": [rank],
                "node": [0],
                "device_index": [rank],
                "device_name": ["NVIDIA H100 80GB HBM3"],
                "hardware": ["h100-sxm"],
                "sm_major": [9],
                "sm_minor": [0],
                "sm_count": [132],
                "memory_bytes": [80 * 2**30],
                "represents": [[rank]],
            },
            rank=rank,
        )
        w.write(
            "kernels",
            {
                "kernel_id": list(range(len(KERNEL_NAMES))),
                "name": [k for k, _, _ in KERNEL_NAMES],
                "family": [f for _, f, _ in KERNEL_NAMES],
                "library": [lib for _, _, lib in KERNEL_NAMES],
            },
            rank=rank,
        )
        w.write(
            "communicators",
            {
                "comm_id": ["c0"],
                "comm_rank": [rank],
                "comm_size": [world_size],
                "pg_name": ["0"],
                "ranks": [list(range(world_size))],
                "device": [rank],
            },
            rank=rank,
        )
        phases = ["forward", "backward", "optimizer"]
        w.write(
            "ops",
            {
                "op_id": list(range(ops_per_rank)),
                "parent_op_id": [None] + [0] * (ops_per_rank - 1),
                "name": ["ProfilerStep#0"] + ["aten::mm"] * (ops_per_rank - 1),
                "start_ns": [i * 1000 for i in range(ops_per_rank)],
                "end_ns": [i * 1000 + 900 for i in range(ops_per_rank)],
                "time_source": ["emulated"] * ops_per_rank,
                "input_shapes": [[[1024, 4096], [4096, 4096]]] * ops_per_rank,
                "input_dtypes": [["c10::BFloat16", "c10::BFloat16"]] * ops_per_rank,
                # every op attributed to the module, backward ones included: with no `nn.Module: ` range in the
                # backward phase, none is a recomputed forward (SPEC.md, `ops.phase`)
                "module_path": ["model.layers.0.mlp"] * ops_per_rank,
                "phase": [phases[i * 3 // ops_per_rank] for i in range(ops_per_rank)],
                "iteration": [0] * ops_per_rank,
            },
            rank=rank,
        )
        w.write("api_calls", api_calls(calls_per_rank, seed=seed + rank, n_ops=ops_per_rank), rank=rank)
        w.write(
            "memory_events",
            {
                "seq": [0, 1],
                "ts_ns": [10, 20],
                "kind": ["alloc", "free"],
                "space": ["device", "device"],
                "address": [1 << 40, 1 << 40],
                "bytes": [2 << 20, 2 << 20],
                "device": [rank, rank],
                "allocated_bytes": [2 << 20, 0],
            },
            rank=rank,
        )
    return Path(run_dir)
