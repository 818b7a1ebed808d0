"""Flex attention priced from the blocks its mask computes: block masks built outside `torch.compile` are
computed on the host (`native/host_values.cpp`, out= overloads such as `arange.out` included), the emulator
reads their per-row block counts at each flex template launch (`triton_launches.py`), and the simulator's
FLOPs are those blocks' (`simulator/triton_work.py`), against the analytical counts of a causal mask and a
sliding window. With expandable segments, pointers into the mapped reservation are device pointers to the
driver (Inductor's static launcher checks every tensor argument with `cuPointerGetAttribute`)."""

import json

import pandas as pd
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli.app import app
from maya.simulator.triton_work import causal_blocks, describe
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_flex_templates_count_the_blocks_of_causal_and_sliding_window_masks(tmp_path):
    out = tmp_path / "run"
    script = WORKLOADS / "flex_masks.py"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(script)])
    assert r.exit_code == 0, r.output
    assert "device pointer status 0 same True" in (out / "logs" / "rank0.txt").read_text()
    calls = pd.DataFrame(Run(out).table("api_calls").to_pylist())
    flex = [a for a in calls["args"].dropna() if '"arg_KV_NUM_BLKS"' in a]
    forward = {}
    for text in flex:
        note = json.loads(text)["triton"]
        assert "block_counts" in note, note  # read from the host-computed mask, not a stand-in
        counts = note["block_counts"]
        blocks = counts["arg_KV_NUM_BLKS"] + counts["arg_FULL_KV_NUM_BLKS"]
        work = describe("triton_tem_fused_flex_attention", text)
        assert work["mask"] == "counted"
        if work["op"] == "flex_fwd":
            forward[blocks] = work["flops"]
    causal, window = causal_blocks(512, 512, 128, 128), causal_blocks(512, 512, 128, 128, window=128)
    assert (causal, window) == (10, 7)  # 4 x 5 / 2; then 1 + 2 + 2 + 2
    assert forward == {b: pytest.approx(4 * 2 * b * 128 * 128 * 64) for b in (causal, window)}
