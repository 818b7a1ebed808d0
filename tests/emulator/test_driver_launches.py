"""Kernels launched through the driver API: a cooperative grid (`cuLaunchCooperativeKernel`, Transformer Engine's
multi-block LayerNorm) is recorded as a launch of its kernel, not refused as an unemulated API."""

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_cooperative_launch_is_recorded_as_a_launch_of_its_kernel(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "cooperative_launch.py")]
    )
    assert r.exit_code == 0, r.output
    assert "cooperative launch 0" in r.output and "unimplemented CUDA API" not in r.output
    run = Run(out)
    calls = run.table("api_calls")
    launches = calls.filter(pc.equal(calls.column("api"), "cuLaunchCooperativeKernel")).to_pylist()
    assert [c["status"] for c in launches] == [0]
    kernels = {k["kernel_id"]: k["name"] for k in run.table("kernels").to_pylist()}
    assert kernels[launches[0]["kernel_id"]] == "ln_fwd_general_kernel"
    grid = [launches[0][k] for k in ("grid_x", "grid_y", "grid_z", "block_x", "shared_mem_bytes")]
    assert grid == [12, 4, 1, 128, 4096]
