"""The NeuSight suite kind's prediction through `maya.api.replay`: the CUDA-event windows of a synthetic trace
(three passes, each a forward and a backward between event records) read on the simulated schedule."""

import pytest

from maya.estimators import KernelEstimator, Registry
from maya.simulator.trace_builder import TraceBuilder
from maya.validation import neusight
from maya.validation.plan import RowPlan
from maya.validation.store import RowKey


def neusight_like(run_dir, forward_k: int, backward_k: int):
    """A one-GPU run of three passes: records 0 and 1 around a GEMM of depth `forward_k`, records 2 and 3
    around one of depth `backward_k` (as `neusight_train.py` records around the forward and the backward)."""
    b = TraceBuilder(1, hardware="h100-sxm")
    r = b.rank(0)
    for _ in range(neusight.ITERATIONS):
        r.record(0)
        r.gemm(4096, 4096, forward_k, 1)
        r.record(1)
        r.record(2)
        r.gemm(4096, 4096, backward_k, 1)
        r.record(3)
        r.device_sync()
    return b.write(run_dir)


@pytest.mark.slow
def test_the_windows_are_the_simulated_spans_between_the_records(tmp_path):
    warehouse = tmp_path / "warehouse.duckdb"
    Registry(warehouse).register(KernelEstimator(), data_hash="stub", config_hash="stub", metrics={})
    run = neusight_like(tmp_path / "run", forward_k=4096, backward_k=8192)
    plan = RowPlan(
        key=RowKey(0, "synthetic", "h100-sxm", "gemm", 1, 1e-3),
        script=tmp_path / "unused.py",
        args=(),
        hardware="h100-sxm",
        cluster=None,
    )
    predicted = neusight.predict(plan, run, "latest", warehouse)
    fw, bw = predicted.details["fw_ms"], predicted.details["bw_ms"]
    assert 0 < fw < bw and bw / fw == pytest.approx(2.0, rel=0.2)  # twice the GEMM depth, about twice the time
    assert predicted.predicted_s == pytest.approx((fw + bw) / 1e3)
    assert predicted.details["iteration_ms"] >= fw + bw
    assert predicted.details["fw_flops"] == pytest.approx(2 * 4096**3) and predicted.details["data_dependent"] == 0
    assert predicted.band_low_s is None and predicted.band_high_s is None  # a stub estimator: no residuals, no band
