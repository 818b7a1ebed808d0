"""The tensor-core GEMM price anchored to public cuBLAS rows: which parts, which calls, by how much."""

import numpy as np
import pandas as pd
import pytest

from maya.estimators import TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.gemm_reference import (
    MIN_FLOPS,
    REFERENCES,
    reference_of,
    reference_rows,
    time_factor,
    uncalibrated,
)
from maya.estimators.hardware_table import hardware_arrays

SMALL = TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)
SIZES = (2048.0, 3072.0, 4096.0, 6144.0, 8192.0)


def gemms(hw: str, dtype: str = "bf16") -> pd.DataFrame:
    """Square-ish GEMMs of every size pair on `hw`, timed at 231 TFLOP/s (Vidur's A100 at 8192^3)."""
    sizes = [(m, n, 8192.0) for m in SIZES for n in SIZES]
    frame = pd.DataFrame(sizes, columns=["m", "n", "k"]).assign(hardware=hw, family="gemm", op="mm", dtype=dtype)
    return frame.assign(measured_ns=2 * frame["m"] * frame["n"] * frame["k"] / 231e12 * 1e9)


@pytest.fixture(scope="module")
def estimator():
    return train(pd.concat([gemms("a100-sxm-80gb"), gemms("a40")], ignore_index=True), SMALL).estimator


def test_a_compute_bound_gemm_on_a_reference_part_runs_at_the_public_rate(estimator):
    call = gemms("a100-sxm-80gb").iloc[[-1]].drop(columns="measured_ns")  # 8192^3, measured: the exact lookup
    learned = uncalibrated(estimator).predict(call)
    calibrated = estimator.predict(call)
    assert learned["method"].iat[0] == calibrated["method"].iat[0] == "lookup"
    assert learned["duration_ns"].iat[0] == pytest.approx(2 * 8192.0**3 / 231e12 * 1e9)
    ratio = REFERENCES["a100-sxm-80gb"].ratio
    assert calibrated["duration_ns"].iat[0] == pytest.approx(learned["duration_ns"].iat[0] / ratio)
    assert calibrated["duration_low_ns"].iat[0] == pytest.approx(
        max(learned["duration_low_ns"].iat[0] / ratio, calibrated["roofline_ns"].iat[0])
    )


def test_parts_of_another_envelope_keep_the_learned_price(estimator):
    for part in ("a40", "a100-pcie-40gb"):  # no public cuBLAS row; a PCIe part's cap binds lower
        call = gemms(part).iloc[[-1]].drop(columns="measured_ns")
        assert (
            estimator.predict(call)["duration_ns"].iat[0] == uncalibrated(estimator).predict(call)["duration_ns"].iat[0]
        )


def test_the_same_silicon_and_power_share_a_reference():
    assert reference_of("a100-sxm-40gb") is reference_of("a800-sxm-80gb") is REFERENCES["a100-sxm-80gb"]
    assert reference_of("h800") is reference_of("h200") is REFERENCES["h100-sxm"]
    for part in ("a100-pcie-40gb", "a100-pcie-80gb", "h100-pcie", "h100-nvl", "a40", "b200", "l40s"):
        assert reference_of(part) is None


def test_only_the_time_the_tensor_cores_set_in_a_reference_dtype_speeds_up():
    calls = pd.DataFrame(
        {
            "hardware": "h100-sxm",
            "family": "gemm",
            "dtype": ["bf16", "bf16", "fp32", "fp8"],
            "m": [8192.0, 8192.0, 8192.0, 8192.0],
            "n": [8192.0, 256.0, 8192.0, 8192.0],  # compute-bound, memory-bound, fp32 (CUDA cores), fp8
            "k": [8192.0, 8192.0, 8192.0, 8192.0],
        }
    )
    hw = hardware_arrays(calls)
    flops = 2 * calls["m"] * calls["n"] * calls["k"]
    moved = 2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])
    factor = time_factor(calls["dtype"], hw, flops.to_numpy(), moved.to_numpy())
    ratio = REFERENCES["h100-sxm"].ratio
    assert factor[0] == pytest.approx(1 / ratio)
    share = (flops[1] / hw.peak_flops[1]) / (moved[1] / hw.bandwidth[1])  # most of its roofline is memory's
    assert share < 1 and factor[1] == pytest.approx(1 - share + share / ratio) and factor[0] < factor[1] < 1
    assert factor[2] == factor[3] == 1.0  # fp8's kernels were not among the reference rows


def test_reference_rows_are_compute_bound_cublas_rows_neither_selected_nor_power_capped_on_hopper():
    def row(source, impl, hw="h100-sxm", dtype="bf16", size=8192.0):
        return {"source": f"kp:{source}", "impl": impl, "hardware": hw, "dtype": dtype, "m": size, "n": size, "k": size}

    rows = pd.DataFrame(
        [
            row("zzc_issue79_h100", "torch.matmul (cuBLAS)"),
            row("zzc_issue79_h100", "torch.matmul (cuBLAS)", size=1024.0),  # launch-bound
            row("fastcu_readme", "fast.cu best hand-written kernel"),  # not cuBLAS
            row("mamf_table", "torch.mm (cuBLAS/cuBLASLt)"),  # a sweep's best shape
            row("gpu_fryer_1.1.0", "cuBLASLt"),  # Hopper at its sustained clock
            row("gpu_fryer_1.1.0", "cuBLASLt", hw="a100-sxm-80gb"),  # Ampere: no burst/sustained gap
            row("gpu_fryer_1.1.0", "cuBLASLt", dtype="fp8"),
        ]
    ).assign(batch=np.nan)
    chosen = reference_rows(rows)
    assert chosen.index.tolist() == [0, 5]


def test_a_launch_bound_gemm_keeps_the_learned_price_a_large_one_the_reference(estimator):
    """The reference rows are all >= MIN_FLOPS: a 512^3 bf16 GEMM (launch-bound) on an A100 keeps its learned time,
    an 8192^3 one is sped up by the part's ratio."""
    calls = pd.DataFrame({"m": [512.0, 8192.0], "n": [512.0, 8192.0], "k": [512.0, 8192.0]}).assign(
        hardware="a100-sxm-80gb", family="gemm", op="mm", dtype="bf16"
    )
    assert 2 * 512.0**3 < MIN_FLOPS <= 2 * 8192.0**3
    learned = uncalibrated(estimator).predict(calls)["duration_ns"].to_numpy()
    calibrated = estimator.predict(calls)["duration_ns"].to_numpy()
    assert calibrated[0] == learned[0]
    assert calibrated[1] == pytest.approx(learned[1] / REFERENCES["a100-sxm-80gb"].ratio)
    hw = hardware_arrays(calls)
    flops = 2 * calls["m"] * calls["n"] * calls["k"]
    moved = 2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])
    assert time_factor(calls["dtype"], hw, flops.to_numpy(), moved.to_numpy())[0] == 1.0


def test_the_reference_ramps_in_over_the_decade_below_min_flops_without_a_step():
    """Between MIN_FLOPS / 10 and MIN_FLOPS the ratio grows with log10 of FLOPs: no price step at either edge, and a
    compute-bound GEMM's calibrated time keeps growing with its size."""
    sizes = np.geomspace(256.0, 8192.0, 200)  # square: compute-bound from ~470 on an A100 in bf16
    calls = pd.DataFrame({"m": sizes, "n": sizes, "k": sizes}).assign(
        hardware="a100-sxm-80gb", family="gemm", dtype="bf16"
    )
    hw = hardware_arrays(calls)
    flops = (2 * calls["m"] * calls["n"] * calls["k"]).to_numpy()
    moved = (2.0 * (calls["m"] * calls["k"] + calls["k"] * calls["n"] + calls["m"] * calls["n"])).to_numpy()
    factor = time_factor(calls["dtype"], hw, flops, moved)
    ratio = REFERENCES["a100-sxm-80gb"].ratio
    assert (factor[flops <= MIN_FLOPS / 10] == 1.0).all()
    full = flops >= MIN_FLOPS
    compute_bound = full & (flops / hw.peak_flops >= moved / hw.bandwidth)
    assert factor[compute_bound] == pytest.approx(1 / ratio)
    ramp = (flops > MIN_FLOPS / 10) & ~full
    assert ramp.any() and ((factor[ramp] < 1.0) & (factor[ramp] > 1 / ratio - 1e-12)).all()
    assert np.abs(np.diff(factor)).max() < 0.01  # no step anywhere along the sweep
    roofline = np.maximum(flops / hw.peak_flops, moved / hw.bandwidth)
    assert (np.diff(roofline * factor) > 0).all()


def test_a_roofline_price_carries_no_harness_and_is_not_calibrated():
    """Only prices made from measurements (looked up or learned) carry the measuring harness the reference corrects:
    a GEMM priced at its roofline band keeps its band on a reference part, the high end included."""
    from maya.estimators import KernelEstimator
    from maya.estimators.efficiency_model import Band

    calls = pd.DataFrame({"m": [8192.0], "n": [8192.0], "k": [8192.0]}).assign(
        hardware="h100-sxm", family="gemm", op="mm", dtype="bf16"
    )
    on = KernelEstimator(roofline_bands={"gemm": Band(0.0, 0.4)}).predict(calls)
    off = KernelEstimator(roofline_bands={"gemm": Band(0.0, 0.4)}, gemm_reference=False).predict(calls)
    assert on["method"].tolist() == ["roofline"]
    for column in ("duration_ns", "duration_low_ns", "duration_high_ns"):
        assert on[column].tolist() == off[column].tolist()
