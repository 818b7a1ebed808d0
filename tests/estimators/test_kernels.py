"""Kernel estimators: work counting, roofline fallback, exact lookup, learned models and method tags."""

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.estimators import METHODS, CallFrameError, KernelEstimator, TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.families import PREDICTORS
from maya.estimators.features import features_of
from maya.estimators.hardware_table import catalog_names, hardware_arrays
from maya.estimators.launch_floor import DEVICE_FLOOR_S
from maya.estimators.training_data import load_kernels, neusight_dir

SMALL = TrainConfig(params=ModelParams(n_estimators=20, max_depth=4), validate=False)
FP32_KEY = {
    "gemm": "gemm@cuda",
    "elementwise": "elementwise@wide",
    "normalization": "normalization@wide",
    "softmax": "softmax@wide",
}
"""The model (segment) of each family that NeuSight's fp32 kernels train (`maya.estimators.segments`)."""


@pytest.fixture(scope="module")
def measured():
    """A small sample of NeuSight's training kernels (A100, V100, T4, P100, P4)."""
    return load_kernels(neusight_dir() / "kernels_train.parquet").sample(3000, random_state=1).reset_index(drop=True)


@pytest.fixture(scope="module")
def estimator(measured):
    return train(measured, SMALL).estimator


def gemm_call(hw="h100-sxm", m=4096.0, n=2048.0, k=1024.0, batch=1.0, dtype="bf16"):
    return pd.DataFrame(
        {
            "hardware": [hw],
            "family": ["gemm"],
            "op": ["mm"],
            "dtype": [dtype],
            "batch": [batch],
            "m": [m],
            "n": [n],
            "k": [k],
        }
    )


def test_gemm_flops_bytes_and_features():
    calls = gemm_call(batch=2.0)
    from maya.estimators.calls import normalize

    frame = normalize(calls)
    hw = hardware_arrays(frame)
    work = PREDICTORS["gemm"].work(frame, hw)
    assert work.flops[0] == 2 * 2 * 4096 * 2048 * 1024
    assert work.bytes[0] == 2 * 2 * (4096 * 1024 + 1024 * 2048 + 4096 * 2048)  # bf16: A, B and C once
    features = features_of(PREDICTORS["gemm"], frame, hw, work, with_hardware=True)
    row = dict(zip(features.names, features.matrix[0]))
    ridge = 989.4e12 / 3350e9
    assert row["log2_intensity_over_ridge"] == pytest.approx(np.log2(work.flops[0] / work.bytes[0] / ridge))
    assert row["log2_roofline_over_floor"] == pytest.approx(np.log2(work.roofline_s(hw)[0] / 2e-6))  # device floor
    waves = 2 * 32 * 16 / 132  # 128x128 tiles over 132 SMs
    assert row["log2_waves_128x128"] == pytest.approx(np.log2(waves))
    assert row["wave_fill_128x128"] == pytest.approx(waves / np.ceil(waves))
    assert row["m_alignment"] == 8 and row["k_alignment"] == 8
    assert row["sm_count"] == 132


def test_roofline_fallback_without_models():
    out = KernelEstimator().predict(gemm_call())
    h100 = hardware.get("h100-sxm")
    compute_s = 2 * 4096 * 2048 * 1024 / h100.peak_flops("bf16")
    assert out["method"].tolist() == ["roofline"]
    assert out["duration_ns"][0] == pytest.approx(compute_s * 1e9)
    assert out["roofline_ns"][0] == out["duration_low_ns"][0] and out["efficiency"][0] == 1.0
    # memory bound: a copy of 1 GiB on the device reads and writes it once
    copy = pd.DataFrame({"hardware": ["NVIDIA H100 80GB HBM3"], "family": ["copy"], "op": ["DtoD"], "bytes": [2.0**30]})
    assert KernelEstimator().predict(copy)["duration_ns"][0] == pytest.approx(2 * 2**30 / 3350e9 * 1e9)
    # a kernel of almost no work (a grouped GEMM's one-block setup over 8 offsets) still takes the device floor
    setup = pd.DataFrame({"hardware": ["h100-sxm"], "family": ["other"], "op": ["_grouped_mm"], "numel": [8.0]})
    priced = KernelEstimator().predict(setup)
    assert priced["roofline_ns"][0] <= 1 and priced["duration_ns"][0] == pytest.approx(DEVICE_FLOOR_S * 1e9)


def test_exact_lookup_hit(estimator, measured):
    """NeuSight timed each call on its own: a hit's device time is the measurement less its host's dispatch,
    and timed on its own it reads back as measured. Calls on their floor give no device time: not looked up."""
    rows = measured.head(60)
    known = np.array(
        [
            np.isnan(
                estimator.models[FP32_KEY[f]].floors.device_time(
                    np.array([h]), np.array([o]), np.array([t * 1e-9]), np.array([True])
                )[2][0]
            )
            for f, h, o, t in zip(rows["family"], catalog_names(rows["hardware"]), rows["op"], rows["measured_ns"])
        ]
    )
    assert 20 <= known.sum() < len(rows)
    out = estimator.predict(rows)
    assert (out["method"][known] == "lookup").all() and (out["method"][~known] != "lookup").all()
    np.testing.assert_allclose(out["isolated_ns"][known], rows["measured_ns"][known])
    assert (out["duration_ns"][known] < rows["measured_ns"][known]).all()  # the dispatch taken off


@pytest.mark.slow
def test_method_tags(estimator, measured):
    seen = measured[measured["family"] == "gemm"].head(1).assign(m=lambda d: d["m"] + 7)  # shape never measured
    same_arch = seen.assign(hardware="NVIDIA A100 80GB PCIe")  # A100 40GB was trained on: same architecture
    new_arch = seen.assign(hardware="l4")  # Ada: no GPU of its architecture in the training data
    unmodelled = gemm_call().assign(family="other", op="", numel=1e6)
    composed = gemm_call().assign(family="attention", op="sdpa_fwd")  # no attention model: from its GEMMs
    seen = seen.assign(hardware="a100-pcie-40gb")
    calls = pd.concat([measured.head(1), seen, same_arch, new_arch, unmodelled, composed], ignore_index=True)
    out = estimator.predict(calls)
    assert out["method"].tolist() == ["lookup", "model", "model", "model_transfer", "roofline", "composed"]
    assert set(out["method"]) == set(METHODS)
    learned = out.iloc[1:4]
    assert (learned["duration_ns"] >= learned["roofline_ns"]).all()
    assert ((learned["efficiency"] > 0) & (learned["efficiency"] <= 1)).all()
    assert (learned["duration_low_ns"] <= learned["duration_ns"]).all()
    assert (learned["duration_ns"] <= learned["duration_high_ns"]).all()


def test_repeated_shapes_priced_once_and_consistently(estimator, measured):
    calls = pd.concat([measured.head(50)] * 3, ignore_index=True).assign(m=lambda d: d["m"] + 1)
    out = estimator.predict(calls)
    assert len(out) == 150
    np.testing.assert_array_equal(out["duration_ns"][:50], out["duration_ns"][100:])


def test_calls_priced_again_after_others_are_not_priced_twice(estimator, measured, monkeypatch):
    """The band prices each program's kernels again after every other program's (and the GEMMs composed attention
    prices in between): each set of distinct shapes is priced once, and its prices come back the same."""
    priced = []
    price = KernelEstimator._price
    monkeypatch.setattr(
        KernelEstimator, "_price", lambda self, calls, keys: priced.append(len(calls)) or price(self, calls, keys)
    )
    programs = [measured.head(40).assign(m=lambda d, i=i: d["m"] + i) for i in range(3)]
    first = [estimator.predict(p) for p in programs]
    again = [estimator.predict(p) for p in programs]
    assert len(priced) == 3  # once each, not six times
    for a, b in zip(first, again):
        pd.testing.assert_frame_equal(a, b)


def test_bad_call_frames():
    with pytest.raises(CallFrameError, match="missing column"):
        KernelEstimator().predict(pd.DataFrame({"hardware": ["h100-sxm"]}))
    with pytest.raises(CallFrameError, match="unknown family value"):
        KernelEstimator().predict(gemm_call().assign(family="conv"))
    with pytest.raises(KeyError, match="unknown hardware 'h300'"):
        KernelEstimator().predict(gemm_call(hw="h300"))


def test_training_metrics_and_bands(measured):
    result = train(measured[measured["family"] == "softmax"], TrainConfig(params=SMALL.params))
    metrics = result.metrics["families"]["softmax@wide"]
    assert metrics["validation_mape"] < metrics["roofline_mape"]
    assert set(metrics["transfer_mape"]) <= set(metrics["hardware"])
    models = result.estimator.models["softmax@wide"]
    assert models.seen.band.low < 0 < models.seen.band.high
    assert "sm_count" in models.seen.feature_names and "sm_count" not in models.transfer.feature_names


def test_launch_floors_measured_on_fixed_cost_dominated_calls():
    from maya.estimators.launch_floor import MIN_ROWS, LaunchFloors

    n = MIN_ROWS
    hardware = np.array(["a100-pcie-40gb"] * n + ["t4"] * n + ["v100-pcie-32gb"] * n, dtype=object)
    op = np.array(["bmm"] * (3 * n), dtype=object)
    roofline = np.tile(np.geomspace(1e-7, 1e-3, n), 3)
    fixed = np.repeat([20e-6, 30e-6, 0.0], n)
    measured = roofline * 1.25 + fixed
    measured[2 * n :] = roofline[2 * n :] * 1.1  # the V100 rows: no call dominated by fixed time
    floors = LaunchFloors.measure(hardware, op, measured, roofline)
    assert floors.by_op["a100-pcie-40gb"]["bmm"] == pytest.approx(20e-6 + 1.25e-7)
    assert floors.by_op["t4"]["bmm"] == pytest.approx(30e-6 + 1.25e-7)
    assert "v100-pcie-32gb" not in floors.by_op and "v100-pcie-32gb" not in floors.by_hardware
    seconds = floors.seconds(
        np.array(["t4", "t4", "l4"], dtype=object), np.array(["bmm", "linear", "bmm"], dtype=object)
    )
    assert seconds[0] == floors.by_op["t4"]["bmm"]
    assert seconds[1] == floors.by_hardware["t4"]  # op never measured on the T4: the T4's family floor
    assert seconds[2] == pytest.approx(np.median([floors.by_op["a100-pcie-40gb"]["bmm"], floors.by_op["t4"]["bmm"]]))
    assert LaunchFloors.from_json(floors.to_json()) == floors
    assert LaunchFloors().seconds(np.array(["t4"], dtype=object), np.array(["bmm"], dtype=object))[0] == 0.0


def test_learned_predictions_scale_device_floor_or_roofline(estimator, measured):
    """Device time is at least the device floor and the roofline; timed on its own, a call reads its host's
    dispatch (launch floor less the post-launch host time), then the kernel or that host time, the longer."""
    from maya.estimators.launch_floor import POST_LAUNCH_S

    calls = measured.head(200).assign(
        m=lambda d: d["m"] + 3, row=lambda d: d["row"] + 3, numel=lambda d: d["numel"] + 3 * d["numel"] / d["row"]
    )
    out = estimator.predict(calls)
    post_ns = POST_LAUNCH_S * 1e9
    for family, rows in out.groupby("family"):
        floors = estimator.models[FP32_KEY[family]].floors
        floor_ns = floors.seconds(rows["hardware"].to_numpy(), rows["op"].to_numpy()) * 1e9
        assert (floor_ns > post_ns).all()
        assert (rows["duration_ns"] >= np.maximum(rows["roofline_ns"], DEVICE_FLOOR_S * 1e9) - 1e-6).all()
        np.testing.assert_allclose(rows["isolated_ns"], floor_ns - post_ns + np.maximum(rows["duration_ns"], post_ns))
    np.testing.assert_allclose(out["efficiency"], out["roofline_ns"] / out["duration_ns"])


@pytest.mark.slow
def test_isolated_measurements_train_device_time():
    """Calls timed on their own read the host's dispatch, then the kernel or the host's post-launch time: the
    model learns the device time under them, as from device timings of the same kernels."""
    from maya.estimators.launch_floor import POST_LAUNCH_S

    rng = np.random.default_rng(0)
    numel = np.round(2.0 ** rng.uniform(10, 28, 600))
    calls = pd.DataFrame(
        {
            "hardware": "a100-pcie-40gb",
            "family": "elementwise",
            "op": "add",
            "dtype": "fp32",
            "numel": numel,
            "operands": 2.0,
        }
    )
    device_ns = 2_000.0 + 12 * numel / 1555e9 * 1e9 * 1.3  # 3 x 4 bytes per element at 77% of the bandwidth
    jitter = 1 + rng.uniform(0, 0.01, len(numel))  # the host's dispatch varies from call to call
    isolated_ns = (20_000.0 + np.maximum(device_ns, POST_LAUNCH_S * 1e9)) * jitter
    config = TrainConfig(params=ModelParams(n_estimators=60), validate=False)
    estimator = train(calls.assign(measured_ns=isolated_ns, timing="isolated"), config).estimator
    probe = calls.assign(numel=lambda d: d["numel"] + 1).iloc[::7]  # shapes never measured
    out = estimator.predict(probe)
    timed = device_ns[::7] > 2 * POST_LAUNCH_S * 1e9  # kernels that outlast the post-launch host time
    np.testing.assert_allclose(out["duration_ns"][timed], device_ns[::7][timed], rtol=0.1)
    np.testing.assert_allclose(out["isolated_ns"], isolated_ns[::7], rtol=0.06)  # kernels hidden in the jitter
    hidden = device_ns[::7] < POST_LAUNCH_S * 1e9 / 2  # under the post-launch host time: only bounded
    assert hidden.sum() >= 10
    assert (
        (out["duration_ns"][hidden] >= out["roofline_ns"][hidden]) & (out["duration_ns"][hidden] <= POST_LAUNCH_S * 1e9)
    ).all()
    as_device = train(calls.assign(measured_ns=device_ns, timing="device"), config).estimator
    np.testing.assert_allclose(as_device.predict(probe)["duration_ns"][timed], out["duration_ns"][timed], rtol=0.1)
    with pytest.raises(ValueError, match="unknown timing value"):
        train(calls.assign(measured_ns=device_ns, timing="wall"), SMALL)


@pytest.mark.slow
def test_post_launch_time_matches_neusight_elementwise_sweeps():
    """POST_LAUNCH_S is what NeuSight's elementwise sweeps show: the floor less the intercept of the
    bandwidth-bound regime, per GPU and op."""
    from maya.estimators.launch_floor import POST_LAUNCH_S

    kernels = load_kernels(neusight_dir() / "kernels_train.parquet")
    post = []
    for _, group in kernels[kernels["family"] == "elementwise"].groupby(["hardware", "op"]):
        us, mb = group["measured_ns"] / 1e3, group["numel"] * 4 * (group["operands"] + 1) / 1e6
        floor = us.min()
        linear = (us > 3 * floor) & (us < 30 * floor)
        if linear.sum() >= 30:
            post.append(floor - np.polyfit(mb[linear], us[linear], 1)[1])
    assert len(post) >= 50
    assert np.median(post) == pytest.approx(POST_LAUNCH_S * 1e6, abs=0.1)


def test_softmax_block_size_follows_pytorch():
    from maya.estimators.families.softmax import block_threads

    rows = np.array([1280.0, 2048.0, 2049.0, 4096.0, 16384.0, 100.0])
    np.testing.assert_array_equal(block_threads(rows, np.full(6, 4.0)), [256, 256, 512, 512, 512, 32])
    calls = pd.DataFrame(
        {
            "hardware": "a100-pcie-40gb",
            "family": "softmax",
            "op": "softmax",
            "dtype": "fp32",
            "numel": [8192 * 4096.0, 8192 * 2560.0, 8192 * 512.0],
            "row": [4096.0, 2560.0, 512.0],
        }
    )
    from maya.estimators.calls import normalize

    frame = normalize(calls)
    hw = hardware_arrays(frame)
    features = PREDICTORS["softmax"].shape_features(frame, hw)
    # 4096: two full vectorised passes of 512 threads x 4; 2560: one pass, then 512 elements one by one
    np.testing.assert_allclose(features["block_loop_iterations"][:2], [2, 2])
    np.testing.assert_allclose(features["scalar_tail_share"][:2], [0, 512 / 2560])
    assert features["warp_softmax"].tolist() == [0, 0, 1] and features["warp_lane_use"][2] == 1.0
    resident = 4 * 4096 * 4 / (192 * 1024)  # four 512-thread blocks per A100 SM, 16 KiB rows, 192 KiB L1
    assert features["log2_resident_row_bytes_over_l1"][0] == pytest.approx(np.log2(resident))


def test_softmax_rereads_count_dram_traffic_only_when_resident_rows_exceed_l2():
    from maya.estimators.calls import normalize

    rows = [512.0, 4096.0, 16384.0]  # warp kernel; block kernels with 16 KiB and 64 KiB rows
    calls = normalize(
        pd.DataFrame(
            {
                "hardware": ["p4", "p4", "p4", "a100-pcie-40gb"],
                "family": "softmax",
                "op": "softmax",
                "dtype": "fp32",
                "numel": [2.0**24] * 4,
                "row": [*rows, 16384.0],
            }
        )
    )
    hw = hardware_arrays(calls)
    per_element = PREDICTORS["softmax"].count(calls, np.full(4, 4.0), hw).bytes / 2.0**24
    # P4: 20 SMs x four 512-thread blocks; 16 KiB rows (1.25 MiB) fit its 2 MiB L2, 64 KiB rows (5 MiB) do not
    spill = 1 - 2 * 2**20 / (20 * 4 * 16384 * 4)
    np.testing.assert_allclose(per_element, [8, 8, 4 * (2 + 2 * spill), 8])  # A100: 27 MiB resident < 40 MiB


def test_transfer_only_training_prices_every_call_with_the_transfer_model(measured):
    gemm = measured[measured["family"] == "gemm"]
    models = train(gemm, TrainConfig(params=SMALL.params, validate=False, seen_model=False)).estimator.models[
        "gemm@cuda"
    ]
    assert models.seen is models.transfer and "sm_count" not in models.seen.feature_names
