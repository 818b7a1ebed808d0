"""Which held-out residuals each prediction's band takes: the seen model's from whole workloads held out (a
workload's shapes were never measured), from whole GPUs held out on a GPU never measured of an architecture
trained on, the transfer model's from whole architectures held out; a composed call carries its products' band."""

import numpy as np
import pandas as pd
import pytest

from maya.estimators import KernelEstimator, TrainConfig, train
from maya.estimators.artifact import dumps, loads
from maya.estimators.efficiency_model import Band, ModelParams
from maya.estimators.families.attention import AttentionPredictor
from maya.estimators.hardware_table import hardware_arrays

CONFIG = TrainConfig(params=ModelParams(n_estimators=30, max_depth=4))
WORKLOADS = 8


def gemms(hardware: str, rng: np.random.Generator, with_workload: bool = True) -> pd.DataFrame:
    """fp16 GEMMs of `WORKLOADS` models, each with hidden sizes of its own and a slowdown of its own (a cuBLAS
    kernel choice its shapes lead to): within a model the slowdown is learnable from its other token counts,
    across models it is not."""
    parts = []
    for w in range(WORKLOADS):
        n, k = 1024 * (w + 2), 1024 * (w + 3)
        slowdown = rng.uniform(1.1, 2.2)
        m = np.round(2 ** rng.uniform(10, 13, 80))
        parts.append(
            pd.DataFrame(
                {
                    "hardware": hardware,
                    "family": "gemm",
                    "op": "mm",
                    "dtype": "fp16",
                    "batch": 1.0,
                    "m": m,
                    "n": float(n),
                    "k": float(k),
                    "model": f"model-{w}" if with_workload else None,
                    "slowdown": slowdown * np.exp(rng.normal(0, 0.02, len(m))),
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    roofline = KernelEstimator().predict(frame.drop(columns=["model", "slowdown"]))["roofline_ns"].to_numpy()
    return frame.assign(measured_ns=roofline * frame.pop("slowdown").to_numpy())


@pytest.fixture(scope="module")
def measurements():
    rng = np.random.default_rng(0)
    return pd.concat([gemms("a100-sxm-80gb", rng), gemms("h100-sxm", rng)], ignore_index=True)


@pytest.fixture(scope="module")
def trained(measurements):
    return train(measurements, CONFIG)


@pytest.mark.slow
def test_seen_band_holds_out_whole_workloads(measurements, trained):
    """A random split keeps every model's hidden sizes in training and is narrower than what a new model's shapes
    meet; the workload split sees that."""
    metrics = trained.metrics["families"]["gemm@tensor"]
    assert metrics["validation_split"] == "workloads held out"
    random = train(measurements.assign(model=None), CONFIG)
    assert random.metrics["families"]["gemm@tensor"]["validation_split"] == "random shapes"
    by_workload = trained.estimator.models["gemm@tensor"].seen.band
    by_shape = random.estimator.models["gemm@tensor"].seen.band
    assert by_workload.high - by_workload.low > 2 * (by_shape.high - by_shape.low)


def log_band(estimator: KernelEstimator, hardware: str) -> tuple[str, float, float]:
    call = pd.DataFrame(
        {
            "hardware": [hardware],
            "family": ["gemm"],
            "op": ["mm"],
            "dtype": ["bf16"],
            "batch": [1.0],
            "m": [3000.0],
            "n": [5120.0],
            "k": [4096.0],
        }
    )
    out = estimator.predict(call).iloc[0]
    return (
        out["method"],
        float(np.log(out["duration_low_ns"] / out["duration_ns"])),
        float(np.log(out["duration_high_ns"] / out["duration_ns"])),
    )


def test_each_situation_takes_its_own_held_out_residuals(trained):
    models = trained.estimator.models["gemm@tensor"]
    gpu = models.unseen_gpu_band
    assert gpu is not None and set(trained.metrics["families"]["gemm@tensor"]["unseen_gpu_mape"]) == {
        "a100-sxm-80gb",
        "h100-sxm",
    }
    for hardware, method, band in (
        ("a100-sxm-80gb", "model", models.seen.band),  # measured GPU: new workload
        ("a100-sxm-40gb", "model", gpu),  # an A100 never measured: GPUs held out
        ("v100-sxm-32gb", "model_transfer", models.transfer.band),
    ):  # new architecture
        got_method, low, high = log_band(trained.estimator, hardware)
        assert got_method == method
        assert high == pytest.approx(band.high, abs=1e-6)  # XGBoost predicts in float32
        assert low == pytest.approx(band.low, abs=1e-6) or low > band.low  # the low end stops at the roofline
    assert (gpu.low, gpu.high) != (models.seen.band.low, models.seen.band.high)


def test_artifact_keeps_the_unseen_gpu_band(trained):
    loaded = loads(dumps(trained.estimator)).models["gemm@tensor"]
    assert loaded.unseen_gpu_band == trained.estimator.models["gemm@tensor"].unseen_gpu_band


@pytest.mark.slow
def test_composed_attention_carries_its_products_band():
    """The composed mechanism (the learned attention model's prior) is composed from GEMM-priced products: with a
    GEMM band it has one, without none. A priced call carries the learned model's band either way (every fused
    kernel, cuDNN's included, is priced from measurements or a measured proxy: `test_attention_model.py`)."""
    call = pd.DataFrame(
        {
            "hardware": ["h100-sxm"],
            "family": ["attention"],
            "op": ["sdpa_fwd_causal"],
            "dtype": ["bf16"],
            "batch": [32.0],
            "m": [8192.0],
            "n": [8192.0],
            "k": [128.0],
        }
    )
    banded = KernelEstimator(roofline_bands={"gemm@tensor": Band(0.0, 0.4)})
    prior = AttentionPredictor().mechanism(call, hardware_arrays(call), banded.predict)
    assert prior.seconds[0] < prior.high_s[0] < prior.seconds[0] * np.exp(0.4) * 1.001
    bare = KernelEstimator()
    assert np.isnan(AttentionPredictor().mechanism(call, hardware_arrays(call), bare.predict).high_s[0])
    priced = bare.predict(call).iloc[0]
    assert priced["method"] == "composed" and priced["duration_ns"] < priced["duration_high_ns"]
