"""Triton launches carry their arguments into the trace (`api_calls.args.triton`) and are priced from them."""

import json

import numpy as np
import pytest
from paths import WORKLOADS

from maya.emulator.launcher import emulate
from maya.simulator.opcodes import classify
from maya.simulator.trace import load
from maya.simulator.work import work_frame

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def triton_calls(run):
    trace = load(run).ranks[0]
    names = dict(zip(trace.kernels["kernel_id"], trace.kernels["name"]))
    frame = work_frame(trace, classify(trace.calls))
    frame["kernel"] = trace.calls["kernel_id"].map(names)
    frame["args"] = trace.calls["args"]
    return frame[frame["kernel"].fillna("").str.startswith(("triton", "scaled_add", "tuned_scale"))]


def test_inductor_kernels_are_described_on_every_launcher(tmp_path):
    """The first launch of each kernel goes through Inductor's static launcher, later ones through the C fast
    launcher it swaps in: both are described. With a cold Inductor cache (`$MAYA_HOME`'s, shared by the suite's
    runs) the first iteration also benchmarks each kernel's configs, hundreds of launches more: counted per kernel,
    not in total, so the test holds whichever test compiled first."""
    assert emulate([str(WORKLOADS / "compiled_mlp.py")], tmp_path / "run").status == "complete"
    calls = triton_calls(tmp_path / "run")
    launches = calls.groupby("kernel").size()
    assert len(launches) == 3 and (launches >= 2).all()  # three kernels, two iterations (and any benchmarking)
    assert calls["args"].notna().all()
    gelu = calls[calls["kernel"] == "triton_poi_fused_gelu_0"].iloc[0]
    assert (gelu["family"], gelu["numel"], gelu["work_bytes"]) == ("elementwise", 32 * 1024, 2 * 32 * 1024 * 4)
    reduction = calls[calls["kernel"] == "triton_per_fused_sum_0"].iloc[0]
    assert (reduction["family"], reduction["numel"], reduction["row"]) == ("reduction", 32 * 256, 32)


def test_user_kernels_are_described_with_their_scalars_and_constexprs(tmp_path):
    assert emulate([str(WORKLOADS / "triton_user_kernel.py")], tmp_path / "run").status == "complete"
    calls = triton_calls(tmp_path / "run")
    assert calls["args"].notna().all()
    add = json.loads(calls[calls["kernel"] == "scaled_add"]["args"].iloc[0])["triton"]
    assert {a["name"]: a.get("value", a.get("shape")) for a in add["args"]} == {
        "x_ptr": [1 << 20],
        "y_ptr": [1 << 20],
        "out_ptr": [1 << 20],
        "n": 1 << 20,
        "alpha": 0.5,
        "BLOCK": 1024,
    }
    assert add["constexprs"] == {"BLOCK": 1024}
    access = {a["name"]: a.get("access") for a in add["args"]}  # read from its source (`triton_access`)
    assert (access["x_ptr"], access["y_ptr"], access["out_ptr"], access["n"]) == ("read", "read", "write", None)
    tuned = calls[calls["kernel"] == "tuned_scale"]
    blocks = {json.loads(a)["triton"]["constexprs"]["BLOCK"] for a in tuned["args"]}
    assert blocks == {128, 1024, 4096}  # @autotune's candidates, each described with its own config
    assert np.allclose(tuned["work_bytes"], 2 * 2 * (1 << 20))
