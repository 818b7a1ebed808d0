"""The attention family's composed estimate: the GEMM family's predictions of the fused kernel's products, one
exp2 per score element on the special-function units, the softmax bookkeeping on the FP32 pipes, causal
tiles, the backward's five products, the overlap of each kernel generation and FlashAttention-2's
shared-memory operand traffic."""

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.estimators import KernelEstimator, TrainConfig, attention_model, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.families.attention import (
    BACKWARD_FP32_OPS,
    FORWARD_FP32_OPS,
    SYNCHRONOUS_MMA_SHARE,
    TILE,
    causal_tile_share,
    flash_backward_tile_traffic,
    flash_forward_tile_traffic,
    flash_smem_ratio,
    sfu_ops_per_clock,
)
from maya.estimators.training_data import load_kernels, neusight_dir

A100, H100 = hardware.get("a100-sxm-80gb"), hardware.get("h100-sxm")


@pytest.fixture(autouse=True)
def mechanism_alone(monkeypatch):
    """These tests are of the composed mechanism: no kernel priced by the learned correction
    (`test_attention_model.py` tests that)."""
    monkeypatch.setattr(attention_model, "CALL_KERNELS", {})


def attention(
    op: str, hw: str = "a100-sxm-80gb", batch: int = 64, seq: int = 2048, head_dim: int = 128, keys: int | None = None
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "hardware": [hw],
            "family": ["attention"],
            "op": [op],
            "dtype": ["bf16"],
            "batch": [float(batch)],
            "m": [float(seq)],
            "n": [float(keys or seq)],
            "k": [float(head_dim)],
        }
    )


def gemms(hw: str, products: list[tuple[int, int, int]], batch: int, seq: int, head_dim: int) -> pd.DataFrame:
    """The fused kernel's products (row-major rows, columns, reduction) as GEMM calls in cuBLAS's column-major
    sizes (m = columns, n = rows), with the kernel's HBM traffic (two [seq x d] operands)."""
    return pd.DataFrame(
        {
            "hardware": hw,
            "family": "gemm",
            "op": "bmm",
            "dtype": "bf16",
            "batch": float(batch),
            "m": [float(p[1]) for p in products],
            "n": [float(p[0]) for p in products],
            "k": [float(p[2]) for p in products],
            "bytes": 2.0 * batch * 2 * seq * head_dim,
        }
    )


def softmax_seconds(hw: hardware.Hardware, elements: float, fp32_ops: float) -> float:
    sfu = hw.sm_count * sfu_ops_per_clock(np.array([hw.sm_major * 10 + hw.sm_minor]))[0] * hw.boost_clock_mhz * 1e6
    return elements * (1 / sfu + fp32_ops / (hw.peak_flops("fp32") / 2))


@pytest.fixture(scope="module")
def estimator():
    """GEMM and elementwise models trained on a sample of NeuSight's kernels (A100 among them)."""
    measured = load_kernels(neusight_dir() / "kernels_train.parquet")
    measured = measured[measured["family"].isin(["gemm", "elementwise"])].sample(4000, random_state=0)
    return train(
        measured.reset_index(drop=True), TrainConfig(params=ModelParams(n_estimators=20, max_depth=4), validate=False)
    ).estimator


@pytest.mark.slow
def test_forward_is_its_two_products_then_the_softmax_on_ampere(estimator):
    b, s, d = 64, 2048, 128
    out = estimator.predict(attention("flash_fwd", batch=b, seq=s, head_dim=d))
    products = estimator.predict(gemms("a100-sxm-80gb", [(s, s, d), (s, d, s)], b, s, d))
    assert (products["method"] == "model").all()  # the GEMM family's learned model prices them
    # FlashAttention-2's forward key tile at head dim 128 is 64 keys: the output is rescaled every 64 keys
    expected = products["duration_ns"].sum() * 1e-9 + softmax_seconds(A100, b * s * s, FORWARD_FP32_OPS + d / 64)
    assert out["method"].tolist() == ["composed"]
    assert out["duration_ns"][0] * 1e-9 == pytest.approx(expected, rel=1e-9)
    assert out["duration_low_ns"][0] <= out["duration_ns"][0] <= out["duration_high_ns"][0]
    # a better GEMM model makes a faster attention: with only the roofline the products run at peak
    peak = KernelEstimator().predict(attention("flash_fwd", batch=b, seq=s, head_dim=d))
    assert peak["duration_ns"][0] * 1e-9 == pytest.approx(
        2 * 2 * b * s * s * d / A100.peak_flops("bf16") + softmax_seconds(A100, b * s * s, FORWARD_FP32_OPS + 2),
        rel=1e-9,
    )
    assert peak["duration_ns"][0] < out["duration_ns"][0]


def test_backward_has_five_products_and_recomputes_the_exponentials():
    b, s, d = 32, 1024, 64
    out = KernelEstimator().predict(attention("flash_bwd", batch=b, seq=s, head_dim=d))
    # head dim 64's 128 x 128 backward tiles read 672 KB of shared memory per 10.5 MFLOP: 5% over the A100's
    # tensor-core time (5,376 against 5,120 clocks)
    expected = 5 * 2 * b * s * s * d / A100.peak_flops("bf16") * 5376 / 5120 + softmax_seconds(
        A100, b * s * s, BACKWARD_FP32_OPS
    )
    assert out["duration_ns"][0] * 1e-9 == pytest.approx(expected, rel=1e-9)


def test_causal_masks_skip_the_tiles_above_the_diagonal():
    assert causal_tile_share(np.array([2048.0]), np.array([2048.0]))[0] == pytest.approx(17 / 32)  # 16 tiles: 136/256
    assert causal_tile_share(np.array([128.0]), np.array([128.0]))[0] == 1.0
    assert causal_tile_share(np.array([65536.0]), np.array([65536.0]))[0] == pytest.approx(513 / 1024)
    # more queries than keys (top-left alignment): the rows below the square see every key
    assert causal_tile_share(np.array([512.0]), np.array([256.0]))[0] == pytest.approx((1 + 2 + 2 + 2) / 8)
    full = KernelEstimator().predict(attention("flash_fwd"))["duration_ns"][0]
    causal = KernelEstimator().predict(attention("flash_fwd_causal"))["duration_ns"][0]
    assert causal == pytest.approx(full * 17 / 32, rel=1e-9)


@pytest.mark.slow
def test_overlap_depends_on_the_kernel_generation():
    """On an H100 cuDNN's warp-specialised kernels hide the softmax under the products; FlashAttention-2's do
    not, and their synchronous MMA reaches only part of the peak; on an A100 both run them one after the other."""
    b, s, d = 64, 4096, 64  # small head dim: the exponentials are a large share
    tensor = 2 * 2 * b * s * s * d / H100.peak_flops("bf16")
    softmax = softmax_seconds(H100, b * s * s, FORWARD_FP32_OPS + d / TILE)
    est = KernelEstimator()
    cudnn = est.predict(attention("sdpa_fwd", "h100-sxm", b, s, d))["duration_ns"][0] * 1e-9
    flash = est.predict(attention("flash_fwd", "h100-sxm", b, s, d))["duration_ns"][0] * 1e-9
    assert cudnn == pytest.approx(max(tensor, softmax), rel=1e-9)
    assert flash == pytest.approx(tensor / SYNCHRONOUS_MMA_SHARE[90] + softmax, rel=1e-9)
    on_a100 = [
        est.predict(attention(op, "a100-sxm-80gb", b, s, d))["duration_ns"][0] for op in ("sdpa_fwd", "flash_fwd")
    ]
    assert on_a100[0] == on_a100[1]


def test_synchronous_mma_reaches_two_thirds_of_the_hopper_peak_and_all_of_the_ampere_peak():
    """FlashAttention-2's products on an H100 take 3/2 the time cuBLAS's warpgroup kernels would; on an A100,
    where mma.sync is the peak instruction, the same; cuDNN's sm_90 kernels use warpgroup MMA."""
    b, s, d = 16, 8192, 128  # long sequence: the products dominate
    est = KernelEstimator()
    products = {hw: 2 * 2 * b * s * s * d / hardware.get(hw).peak_flops("bf16") for hw in ("h100-sxm", "a100-sxm-80gb")}
    # FlashAttention-2 rescales its output every 64 keys at head dim 128; cuDNN's kernels are taken at TILE
    flash_softmax = {hw: softmax_seconds(hardware.get(hw), b * s * s, FORWARD_FP32_OPS + d / 64) for hw in products}
    for hw, share in (("h100-sxm", 2 / 3), ("a100-sxm-80gb", 1.0)):
        flash = est.predict(attention("flash_fwd", hw, b, s, d))["duration_ns"][0] * 1e-9
        assert flash == pytest.approx(products[hw] / share + flash_softmax[hw], rel=1e-9)
    cudnn = est.predict(attention("sdpa_fwd", "h100-sxm", b, s, d))["duration_ns"][0] * 1e-9
    cudnn_softmax = softmax_seconds(H100, b * s * s, FORWARD_FP32_OPS + d / TILE)
    assert cudnn == pytest.approx(max(products["h100-sxm"], cudnn_softmax), rel=1e-9)


def test_exponentials_follow_the_special_function_rate_of_each_architecture():
    assert sfu_ops_per_clock(np.array([80, 90, 70, 61, 120])).tolist() == [16, 16, 16, 32, 16]
    # an H100 SXM: 132 SMs x 16 x 1.98 GHz = 4.18 T exp2/s, 237x fewer than its bf16 FLOP/s
    b, s, d = 64, 2048, 64
    est = KernelEstimator()
    flash = est.predict(attention("flash_fwd", "h100-sxm", b, s, d))["duration_ns"][0] * 1e-9
    tensor = 2 * 2 * b * s * s * d / H100.peak_flops("bf16") / SYNCHRONOUS_MMA_SHARE[90]
    fp32 = b * s * s * (FORWARD_FP32_OPS + d / TILE) / (H100.peak_flops("fp32") / 2)
    assert flash - tensor - fp32 == pytest.approx(b * s * s / (132 * 16 * 1.98e9), rel=1e-9)


@pytest.mark.slow
def test_backward_memory_passes_price_as_elementwise_passes(estimator):
    b, s, d = 64, 2048, 128
    pre = estimator.predict(attention("flash_bwd_preprocess", batch=b, seq=s, head_dim=d))
    post = estimator.predict(attention("flash_bwd_postprocess", batch=b, seq=s, head_dim=d))
    assert pre["method"].tolist() == post["method"].tolist() == ["composed"]
    # preprocess reads dO and O (bf16), writes D and zeroes the fp32 accumulator; postprocess reads it, writes dQ
    numel = b * s * d
    assert pre["roofline_ns"][0] == pytest.approx((2 * 2 * numel + 4 * b * s + 4 * numel) / A100.memory_bandwidth * 1e9)
    assert post["roofline_ns"][0] == pytest.approx((4 * numel + 2 * numel) / A100.memory_bandwidth * 1e9)
    assert pre["duration_ns"][0] >= pre["roofline_ns"][0] and post["duration_ns"][0] >= post["roofline_ns"][0]


def test_a_split_kv_merge_prices_as_a_memory_pass_over_its_splits_not_as_a_forward():
    """`torchflash_fwd_combine` (n = the splits): the splits' fp32 partial outputs and log-sum-exps read, O (bf16) and
    its log-sum-exp written, at the elementwise family's price for those bytes; a small share of the forward."""
    b, s, d, splits = 8, 2048, 64, 3
    est = KernelEstimator()
    merge = est.predict(attention("torchflash_fwd_combine", batch=b, seq=s, head_dim=d, keys=splits))
    forward = est.predict(attention("torchflash_fwd_causal", batch=b, seq=s, head_dim=d))
    numel, rows = b * s * d, b * s
    traffic = splits * (4 * numel + 4 * rows) + 2 * numel + 4 * rows
    assert merge["roofline_ns"][0] == pytest.approx(traffic / A100.memory_bandwidth * 1e9)
    assert merge["roofline_ns"][0] <= merge["duration_ns"][0] < forward["duration_ns"][0] / 3


def test_long_sequences_are_compute_bound_and_scale_quadratically():
    est = KernelEstimator()
    short, long = (est.predict(attention("flash_fwd_causal", batch=16, seq=s))["duration_ns"][0] for s in (8192, 65536))
    assert long / short == pytest.approx(64 * (513 / 1024) / (65 / 128), rel=1e-6)


def test_flash_tiles_shared_memory_traffic_counted_by_hand():
    """Head dim 128. Forward, 128 x 64 tiles, 4 warps of 32 query rows: each warp reads its Q rows (8 KB) and
    the K tile (16 KB) for S, the V tile (16 KB) for PV; the K and V tiles are copied in (32 KB).
    Backward, 64 x 128 tiles, 8 warps: S and dP (2 x 4 warps of 32 x 32, depth 128) 128 KB each, dV and dK
    (4 x 2 warps of 32 x 64, depth 64) 96 KB each, dQ (2 x 4 warps of 32 x 32, depth 128) 128 KB, P and dS
    written (32 KB), the next Q and dO tiles copied in (32 KB)."""
    kib = 1024
    assert flash_forward_tile_traffic(128) == (4 * (8 + 16 + 16) * kib + 32 * kib, 4 * 128 * 64 * 128)
    assert flash_backward_tile_traffic(128) == ((128 + 128 + 96 + 96 + 128 + 32 + 32) * kib, 10 * 64 * 128 * 128)
    # 128 B per clock per SM against 2,048 (A100) or 4,096 (H100) tensor FLOPs per clock per SM
    ratio = flash_smem_ratio(np.array([128.0, 128.0]), np.array([False, True]), np.array([2048.0, 2048.0]))
    assert ratio.tolist() == [0.75, 1.0]
    ratio = flash_smem_ratio(np.array([128.0, 128.0]), np.array([False, True]), np.array([4096.0, 4096.0]))
    assert ratio.tolist() == [1.5, 2.0]
    # head dims whose kernels' tiles are not modelled (96, above 128) have no ratio; 80 runs the 96 kernel
    assert flash_smem_ratio(np.array([80.0, 96.0, 256.0]), np.array([True] * 3), np.full(3, 4096.0)).tolist() == [0] * 3
    assert flash_smem_ratio(np.array([48.0]), np.array([True]), np.array([4096.0]))[0] == pytest.approx(2.1)


def test_hopper_backward_products_run_at_the_shared_memory_rate():
    """On an H100 FlashAttention-2's backward (head dim 128) waits on shared memory: its products take twice
    cuBLAS's time, not the 3/2 of synchronous MMA alone; on an A100 shared memory keeps up (1.0); cuDNN's
    sm_90 kernels (warpgroup MMA, operands straight from shared memory) are unaffected."""
    b, s, d = 16, 8192, 128
    est = KernelEstimator()
    for hw, factor in (("h100-sxm", 2.0), ("a100-sxm-80gb", 1.0)):
        spec = hardware.get(hw)
        flash = est.predict(attention("flash_bwd", hw, b, s, d))["duration_ns"][0] * 1e-9
        products = 5 * 2 * b * s * s * d / spec.peak_flops("bf16")
        assert flash == pytest.approx(products * factor + softmax_seconds(spec, b * s * s, BACKWARD_FP32_OPS), rel=1e-9)
    cudnn = est.predict(attention("sdpa_bwd", "h100-sxm", b, s, d))["duration_ns"][0] * 1e-9
    products = 5 * 2 * b * s * s * d / H100.peak_flops("bf16")
    assert cudnn == pytest.approx(max(products, softmax_seconds(H100, b * s * s, BACKWARD_FP32_OPS)), rel=1e-9)


def test_breakdown_parts_add_up_to_the_prediction():
    """`AttentionPredictor.breakdown` (benchmarks/attention_breakdown.py) shows the parts `compose` adds."""
    from maya.estimators.families.attention import AttentionPredictor
    from maya.estimators.hardware_table import hardware_arrays

    est = KernelEstimator()
    calls = pd.concat(
        [
            attention(op, hw, 16, 8192, 128)
            for hw in ("a100-sxm-80gb", "h100-sxm")
            for op in ("flash_fwd_causal", "flash_bwd_causal", "sdpa_fwd_causal")
        ],
        ignore_index=True,
    )
    parts = AttentionPredictor().breakdown(calls, hardware_arrays(calls), est.predict)
    predicted = est.predict(calls)["duration_ns"].to_numpy() * 1e-9
    assert parts["seconds"].to_numpy() == pytest.approx(predicted, rel=1e-9)
    serial = parts["products_s"] + parts["exp2_s"] + parts["fp32_s"]
    overlapped = np.maximum(parts["products_s"], parts["exp2_s"] + parts["fp32_s"])
    assert parts["seconds"].to_numpy() == pytest.approx(np.where(parts["overlapped"], overlapped, serial), rel=1e-9)
    assert parts["slowdown"].tolist() == [1.0, 1.0, 1.0, 1.5, 2.0, 1.0]
