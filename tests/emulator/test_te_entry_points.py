"""Runtime and driver entry points Transformer Engine's core reaches, answered as a GPU would: a driver function
looked up by its bare name (`#define`d to a versioned one in cuda.h) is the implemented versioned function, not a
loud stub under the bare name; `cudaOccupancyMaxActiveClusters` counts clusters from the blocks' occupancy."""

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVALID_CLUSTER_SIZE = 912


def test_entry_points_answer_as_a_gpu_would(tmp_path):
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(tmp_path / "run"), "--", "python", str(WORKLOADS / "te_entry_points.py")]
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "lookup 0 0" in lines  # cudaSuccess, cudaDriverEntryPointSuccess
    assert "cuDevicePrimaryCtxRelease 0" in lines  # CUDA_SUCCESS from the implemented cuDevicePrimaryCtxRelease_v2
    # h100-sxm: 132 SMs, 2048 threads and 228 KiB of shared memory per SM
    assert "clusters 1 128 0 0 2112" in lines  # 16 blocks of 128 threads per SM
    assert "clusters 2 128 0 0 1056" in lines
    assert "clusters 2 256 102400 0 132" in lines  # 2 blocks of 100 KiB per SM
    assert f"clusters 32 128 0 {INVALID_CLUSTER_SIZE} -1" in lines
    assert "unimplemented CUDA API" not in r.output
