"""A provider written outside Maya, as a subclass of `DurationProvider` overriding only what it knows, runs
through `simulate` and `summarize`: the base class answers everything else the simulator asks."""

import numpy as np

from maya.core import hardware
from maya.simulator import DurationProvider, simulate, summarize
from maya.simulator.durations import HOST_NS
from maya.simulator.opcodes import COLL
from maya.simulator.predict import add_band
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

H100 = hardware.get("h100-sxm")
US = 1_000


class Fixed(DurationProvider):
    """Every kernel takes `kernel_ns`, every collective `collective_ns`: nothing but `device_ns` is defined."""

    name = "fixed"

    def __init__(self, kernel_ns: float = 7 * US, collective_ns: float = 500 * US):
        self.kernel_ns, self.collective_ns = kernel_ns, collective_ns

    def device_ns(self, calls, hardware):
        return np.where(calls["opcode"].to_numpy() == COLL, self.collective_ns, self.kernel_ns)


class Delayed(Fixed):
    """Work starts 3 us after its call returns, and the provider says so in a note."""

    def launch_ns(self, calls):
        return np.full(len(calls), 3.0 * US)

    @property
    def notes(self):
        return ["launches delayed by 3 us"]


class Measured(Fixed):
    """Kernel durations as a measurement would give them: they already hold a collective's contention."""

    replays_measured_kernels = True


def one_kernel(tmp_path):
    b = TraceBuilder(1)
    b.rank(0).kernel(1 * US)
    return load(b.write(tmp_path / "run"))


def overlapping(tmp_path):
    """Two ranks: an all-gather on stream 1 beside a GEMM on stream 0."""
    b = TraceBuilder(2)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.collective("allgather", "dp", 0, stream=1, nelems=1 << 28)
        k.gemm(8192, 8192, 8192, 0)
        k.device_sync()
    return load(b.write(tmp_path / "run"))


def test_a_subclass_defining_device_ns_alone_is_priced_and_reported(tmp_path):
    sim = simulate(one_kernel(tmp_path), H100, Fixed())
    assert sim.devices[0].tolist() == [7 * US]
    assert sim.programs[0].host.tolist() == [HOST_NS["launch"]]  # the base class's host time
    assert sim.result(0).end.tolist() == [HOST_NS["launch"] + 7 * US]  # no launch delay by default
    prediction = summarize(sim)
    assert prediction.durations == "fixed"
    add_band(sim, prediction)  # no kernel estimator: no band, and the prediction says why
    assert prediction.band is None
    assert any("no 10-90% band: durations from fixed" in n for n in prediction.notes)


def test_launch_delays_and_notes_of_a_subclass_reach_the_prediction(tmp_path):
    sim = simulate(one_kernel(tmp_path), H100, Delayed())
    assert sim.result(0).end.tolist() == [HOST_NS["launch"] + 3 * US + 7 * US]
    assert "launches delayed by 3 us" in summarize(sim).notes


def test_measured_kernels_skip_the_contention_replay(tmp_path):
    traces = overlapping(tmp_path)
    gemm = 1
    priced, measured = simulate(traces, H100, Fixed()), simulate(traces, H100, Measured())
    assert (priced.replays, measured.replays) == (2, 1)
    assert priced.devices[0][gemm] > 7 * US  # slowed by the all-gather's SMs
    assert measured.devices[0][gemm] == 7 * US
