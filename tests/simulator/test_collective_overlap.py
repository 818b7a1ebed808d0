"""`benchmarks/collective_overlap.py`: a rank with no steady step, or whose steady step runs no kernel, gets a
clear error instead of an IndexError or a ValueError from an empty array."""

import numpy as np
import pytest
from helpers import benchmark_module, overlapped_steps

from maya.core import hardware
from maya.simulator import RooflineDurations, simulate
from maya.simulator.iterations import Iterations
from maya.simulator.trace import load

H100 = hardware.get("h100-sxm")


@pytest.fixture(scope="module")
def overlap():
    return benchmark_module("collective_overlap")


def steps(tmp_path, gemm: bool):
    """Two ranks, three steps of an all-gather (and, if `gemm`, a GEMM beside it)."""
    run = overlapped_steps(
        tmp_path / f"run{gemm}", [("allgather", "dp", 1)], nelems=1 << 20, gemms=int(gemm), size=1024
    )
    return simulate(load(run), H100, RooflineDurations())


def test_a_step_with_kernels_is_reported(overlap, tmp_path):
    figures, table = overlap.overlap_report(steps(tmp_path, gemm=True))
    assert figures["kernel_ms"] > 0 and table["calls"].sum() == 1


def test_a_steady_step_without_kernels_is_a_clear_error(overlap, tmp_path):
    with pytest.raises(ValueError, match="runs no kernel"):
        overlap.overlap_report(steps(tmp_path, gemm=False))


def test_no_steady_step_is_a_clear_error(overlap, tmp_path):
    sim = steps(tmp_path, gemm=True)
    found = sim.iterations[0]
    sim.iterations[0] = Iterations(found.bounds, np.array([], dtype=np.int64), found.source)
    with pytest.raises(ValueError, match="no steady step"):
        overlap.overlap_report(sim)
