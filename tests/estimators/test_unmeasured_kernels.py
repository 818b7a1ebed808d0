"""What the learned models know and say they do not: a kernel its segment never measured is priced from a
segment that did, relative to the add both measured; predictions shorter than a model's measurements resolve
are marked (`below_measured`)."""

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.estimators import TrainConfig, train
from maya.estimators.artifact import dumps, loads
from maya.estimators.efficiency_model import ModelParams

CONFIG = TrainConfig(params=ModelParams(n_estimators=60, max_depth=4), validate=False)
BANDWIDTH = hardware.get("h100-sxm").memory_bandwidth
SHARE = {("add", "fp32"): 0.8, ("gelu", "fp32"): 0.5, ("add", "fp16"): 0.95}
"""Share of the bandwidth each (kernel, element type) reaches in the synthetic measurements below."""


def calls(op: str, dtype: str, numel: np.ndarray) -> pd.DataFrame:
    operands = 2.0 if op == "add" else 1.0
    return pd.DataFrame(
        {
            "hardware": "h100-sxm",
            "family": "elementwise",
            "op": op,
            "dtype": dtype,
            "numel": numel,
            "row": 4096.0,
            "operands": operands,
        }
    )


def measured(op: str, dtype: str, numel: np.ndarray) -> pd.DataFrame:
    frame = calls(op, dtype, numel)
    moved = frame["numel"] * (frame["operands"] + 1) * (4 if dtype == "fp32" else 2)
    return frame.assign(measured_ns=moved / (SHARE[op, dtype] * BANDWIDTH) * 1e9, timing="device")


@pytest.fixture(scope="module")
def estimator():
    numel = np.round(np.geomspace(2**22, 2**28, 60))
    return train(
        pd.concat(
            [measured("add", "fp32", numel), measured("gelu", "fp32", numel), measured("add", "fp16", numel)],
            ignore_index=True,
        ),
        CONFIG,
    ).estimator


def test_a_kernel_measured_only_in_another_width_is_priced_relative_to_the_add(estimator):
    """fp16 GELU was never measured: its time is the fp32 GELU's relative to the fp32 add (0.8 / 0.5 of the
    bandwidth) times what the fp16 add reaches (0.95), not the fp16 add's own speed."""
    numel = np.array([3e7, 1e8])
    out = estimator.predict(calls("gelu", "fp16", numel))
    expected = 2 * 2 * numel / (0.5 * 0.95 / 0.8 * BANDWIDTH) * 1e9
    np.testing.assert_allclose(out["duration_ns"], expected, rtol=0.1)
    assert (out["method"] == "model_transfer").all()
    add = estimator.predict(calls("add", "fp16", numel * 2 / 3))  # the same bytes moved
    assert (out["duration_ns"] > 1.4 * add["duration_ns"]).all()
    assert estimator.models["elementwise@narrow"].kernels == frozenset({"add"})
    assert (
        loads(dumps(estimator)).predict(calls("gelu", "fp16", numel))["duration_ns"].tolist()
        == out["duration_ns"].tolist()
    )


def test_predictions_shorter_than_the_measurements_are_marked(estimator):
    shortest = estimator.models["elementwise@narrow"].resolves_from_s
    assert shortest == pytest.approx(2 * 3 * 2**22 / (0.95 * BANDWIDTH))  # the quickest fp16 add measured
    out = estimator.predict(calls("add", "fp16", np.array([2.0**12, 2.0**26])))
    assert out["below_measured"].tolist() == [True, False]
    isolated = train(
        measured("add", "fp32", np.round(np.geomspace(2**12, 2**26, 60))).assign(timing="isolated"), CONFIG
    ).estimator
    assert isolated.models["elementwise@wide"].resolves_from_s == pytest.approx(12e-6)  # the post-launch time
    assert loads(dumps(isolated)).models["elementwise@wide"].resolves_from_s == pytest.approx(12e-6)


def test_ops_that_run_one_kernel_share_its_code():
    """NeuSight's `ln`, a traced layer norm and torch's fused RMSNorm run torch's layer-norm kernel; Vidur's RMSNorm
    rows are vLLM's kernel, another one."""
    from maya.estimators.families import PREDICTORS

    norm = PREDICTORS["normalization"]
    ops = pd.DataFrame({"op": ["ln", "native_layer_norm", "_fused_rms_norm", "vllm_rms_norm"]})
    codes = norm.op_codes(ops)
    assert codes[0] == codes[1] == codes[2] != codes[3]
    assert norm.kernel_names(ops["op"]).tolist() == ["native_layer_norm"] * 3 + ["vllm_rms_norm"]
