"""Measuring one config: memory-guard estimates, every op's builder and the timing loop (on CPU tensors:
this exercises the code path, it measures no GPU), op settings, result summaries."""

import pytest
import torch

from maya.profiler.kernels import measure, sweep
from maya.profiler.kernels.configs import FAMILIES, FAMILY_OPS, KernelConfig
from maya.profiler.kernels.footprint import GEMM_WORKSPACE, MAX_BUFFERS, buffer_count, fits, footprint
from maya.profiler.kernels.measure import Measurer
from maya.profiler.kernels.ops import BUILDERS, op_settings
from maya.profiler.kernels.results import percentiles
from maya.profiler.kernels.timing import TimingSettings, WarmUp

FAST = TimingSettings(warmup=1, min_repeats=3, max_repeats=5, target_s=0.001, profiled_repeats=2)
CUDA_ONLY = {"memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "cuda_memset"}

TINY = {
    "mm": dict(m=8, n=16, k=4),
    "linear": dict(m=8, n=16, k=4),
    "addmm": dict(m=8, n=16, k=4),
    "linear_grad_input": dict(m=8, n=16, k=4),
    "linear_grad_weight": dict(m=8, n=16, k=4),
    "bmm": dict(batch=2, m=8, n=16, k=4),
    "sdpa_fwd": dict(batch=1, seq=16, heads=4, kv_heads=2, head_dim=16, causal=1, backend="flash"),
    "sdpa_bwd": dict(batch=1, seq=16, heads=4, kv_heads=4, head_dim=16, causal=0, backend="flash"),
    "softmax_fwd": dict(rows=8, cols=32),
    "softmax_bwd": dict(rows=8, cols=32),
    "gelu_fwd": dict(tokens=8, hidden=32, approximate="tanh"),
    "gelu_bwd": dict(tokens=8, hidden=32, approximate="none"),
    "cross_entropy_fwd": dict(tokens=8, vocab=64),
    "cross_entropy_bwd": dict(tokens=8, vocab=64),
    "embedding_fwd": dict(tokens=8, vocab=64, hidden=32),
    "embedding_bwd": dict(tokens=8, vocab=64, hidden=32),
    "adamw_fused": dict(hidden=512, ffn="swiglu", tp=8, layers=1, n_tensors=6, n_params=393216),
    "adamw_foreach": dict(hidden=512, ffn="gelu", tp=8, layers=1, n_tensors=12, n_params=400000),
    "copy_cast": dict(tokens=8, hidden=32, dst_dtype="bf16"),
    "memcpy_h2d": dict(bytes=4096, pinned=1),
    "memcpy_d2h": dict(bytes=4096, pinned=0),
    "memcpy_d2d": dict(bytes=4096),
    "cuda_memset": dict(bytes=4096),
    "fill_zero": dict(bytes=4096),
}


def tiny(op: str, dtype: str = "fp32") -> KernelConfig:
    dtype = "u8" if op.startswith("memcpy") or op == "cuda_memset" else dtype
    return KernelConfig.make(op, dtype, **TINY.get(op, dict(tokens=8, hidden=32)))


@pytest.fixture(scope="module")
def cpu_measurer() -> Measurer:
    return Measurer(torch.device("cpu"), l2_bytes=0, settings=FAST)


def test_every_op_has_a_builder_and_every_family_a_generator():
    assert set(BUILDERS) == {op for ops in FAMILY_OPS.values() for op in ops}
    assert tuple(sweep.GENERATORS) == FAMILIES


@pytest.mark.parametrize("op", [op for ops in FAMILY_OPS.values() for op in ops])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_op_runs_through_the_timing_loop(cpu_measurer, op, dtype):
    t = cpu_measurer.time_config(tiny(op, dtype))
    if op in CUDA_ONLY:
        assert (t.status, t.error, t.samples) == ("unsupported", "needs a CUDA device", None)
        return
    assert t.status == "ok", t.error
    assert FAST.min_repeats <= len(t.samples.device_ns) <= FAST.max_repeats
    assert len(t.samples.host_ns) == len(t.samples.device_ns) and min(t.samples.host_ns) > 0
    assert t.n_buffers == 2 and t.footprint_bytes > 0


def test_unsupported_backend_is_recorded_with_its_reason(cpu_measurer):
    c = KernelConfig.make("sdpa_fwd", "fp32", **{**TINY["sdpa_fwd"], "backend": "cudnn"})
    t = cpu_measurer.time_config(c)
    assert t.status == "unsupported" and "kernel" in t.error  # torch's reason, e.g. "No available kernel"


def test_memory_guard_skips_before_allocating(cpu_measurer, monkeypatch):
    c = KernelConfig.make("mm", "bf16", m=65536, n=65536, k=65536)
    monkeypatch.setattr(measure, "free_memory", lambda device: 40 << 30)
    monkeypatch.setattr(measure, "build", lambda *a: pytest.fail("allocated a config that does not fit"))
    t = cpu_measurer.time_config(c)
    assert t.status == "skipped_memory" and t.footprint_bytes > 0.7 * (40 << 30)
    assert "needs about" in t.error


def test_footprint_estimates():
    e = 2
    linear = footprint(KernelConfig.make("linear", "bf16", m=4096, n=1024, k=512))
    assert linear.rotated_bytes == (4096 * 512 + 512 * 1024 + 1024) * e
    assert linear.fixed_bytes == 4096 * 1024 * e + GEMM_WORKSPACE
    assert linear.total(3) == 3 * linear.rotated_bytes + linear.fixed_bytes
    attn = dict(batch=2, seq=1024, heads=16, kv_heads=4, head_dim=128, causal=1, backend="flash")
    fwd = footprint(KernelConfig.make("sdpa_fwd", "bf16", **attn))
    bwd = footprint(KernelConfig.make("sdpa_bwd", "bf16", **attn))
    q = 2 * 1024 * 16 * 128 * e
    assert fwd.rotated_bytes == q + 2 * q // 4  # grouped-query k and v are a quarter of q each
    assert bwd.total(1) > fwd.total(1)
    adam = footprint(
        KernelConfig.make("adamw_fused", "fp32", hidden=512, ffn="gelu", tp=1, layers=1, n_tensors=12, n_params=1000)
    )
    assert adam.rotated_bytes >= 4 * 1000 * 4  # parameters, gradients and two moments
    d2d = footprint(KernelConfig.make("memcpy_d2d", "u8", bytes=1 << 20))
    assert d2d.total(1) == 2 << 20


def test_buffer_rotation_spans_the_l2_cache():
    l2 = 50 << 20
    assert buffer_count(1 << 30, l2) == 1  # one set already dwarfs the cache
    assert buffer_count(20 << 20, l2) == 5  # 5 × 20 MiB >= 2 × 50 MiB
    assert buffer_count(1024, l2) == MAX_BUFFERS  # tiny inputs: capped
    assert buffer_count(1024, 0) == 2  # unknown cache (CPU)
    assert fits(70, 100) and not fits(71, 100)


def test_op_settings_select_tf32_and_restore():
    before = torch.get_float32_matmul_precision()
    with op_settings(KernelConfig.make("mm", "fp32", m=1, n=1, k=1, tf32=True)):
        assert torch.get_float32_matmul_precision() == "high"
    with op_settings(KernelConfig.make("mm", "fp32", m=1, n=1, k=1)):
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == before


def test_repeats_and_percentiles():
    s = TimingSettings(min_repeats=10, max_repeats=100, target_s=0.05)
    assert WarmUp(1.0, 1e-5).repeats(s) == 10
    assert WarmUp(1e-3, 1e-5).repeats(s) == 50
    assert WarmUp(1e-7, 1e-5).repeats(s) == 100
    assert percentiles([5, 1, 3, 2, 4])[1] == 3
    p10, p50, p90 = percentiles(list(range(101)))
    assert (p10, p50, p90) == (10, 50, 90)
