"""NCCL's share of a GPU while a collective runs: channels from NCCL's defaults, kernels beside a collective
slowed by the SMs its channels hold and (memory-bound ones) by the bandwidth its copies take."""

import numpy as np
import pytest
from helpers import overlapped_steps

from maya.core import hardware
from maya.core.clusters import load_cluster
from maya.simulator import DurationProvider, MeasuredDurations, RooflineDurations, simulate, summarize
from maya.simulator.contention import footprints, ring_channels, slowdowns
from maya.simulator.opcodes import COLL
from maya.simulator.sustained_clock import EXPONENT, REFERENCES, SustainedClock, overlap_ratio
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

H100, A100 = hardware.get("h100-sxm"), hardware.get("a100-sxm-80gb")


def test_channels_follow_nccls_search_on_each_fabric():
    # NVSwitch nodes: 6 search channels (A100: 240 GB/s of NVLink at 40; H100: 370.8 at 60), doubled twice
    assert ring_channels(A100, load_cluster("dgx-a100"), 1) == 24
    assert ring_channels(H100, load_cluster("dgx-h100"), 1) == 24
    # across nodes, one search channel per NIC (200 Gb/s RoCE at 24 GB/s; 400 Gb/s InfiniBand at 45), doubled once
    assert ring_channels(A100, load_cluster("a100-roce-1600g"), 4) == 16
    assert ring_channels(H100, load_cluster("dgx-h100"), 2) == 16
    # PCIe only: Gen5 x16 at NCCL's 48 GB/s, two channels of 24, doubled once
    assert ring_channels(H100, load_cluster("pcie-gen5-8gpu"), 1) == 4


def test_footprint_of_a_collective():
    names = np.array(["allgather", "allgather", "reducescatter", "allgather"])
    nbytes = np.array([512e6, 512e6, 512e6, 64 * 1024.0])
    ranks, nodes = np.array([8, 1, 8, 8]), np.array([1.0, 1.0, 1.0, 1.0])
    duration = np.array([2e6, 2e6, 2e6, 20e3])  # ns
    sm, hbm = footprints(names, nbytes, ranks, nodes, duration, H100, load_cluster("dgx-h100"))
    assert sm[0] == pytest.approx(24 / 132) and sm[1] == 0 and hbm[1] == 0  # one rank: no collective
    bus = 512e6 * 7 / 8
    assert hbm[0] == pytest.approx(2 * bus / 2e-3 / H100.memory_bandwidth)  # read what it sends, write what it gets
    assert hbm[2] == pytest.approx(3 * bus / 2e-3 / H100.memory_bandwidth)  # and read the operand it reduces
    assert sm[3] == pytest.approx(2 / 132)  # 64 KiB: under 3 x 512 threads x 64 B, NCCL keeps two channels


def test_slowdown_by_what_bounds_the_kernel():
    family = np.array(["gemm", "gemm", "elementwise", "other"])
    compute = np.array([1.0, 0.1, 0.0, 0.0])
    memory = np.array([0.2, 1.0, 0.0, 0.0])
    factor = slowdowns(family, compute, memory, sm_share=0.2, hbm_share=0.5)
    assert factor[0] == pytest.approx(1 / 0.8)  # compute-bound: the SMs it loses
    assert factor[1] == pytest.approx(2.0)  # memory-bound GEMM: the bandwidth it loses
    assert factor[2] == pytest.approx(2.0)  # memory-bound family
    assert factor[3] == pytest.approx(1 / 0.8)  # unknown work: SMs


def overlapping(tmp_path, name="run"):
    """Two ranks: an all-gather on stream 1 beside a large GEMM on stream 0."""
    b = TraceBuilder(2)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.collective("allgather", "dp", 500_000, stream=1, nelems=1 << 28)
        k.gemm(8192, 8192, 8192, 1_000_000)
        k.device_sync()
    return load(b.write(tmp_path / name))


@pytest.mark.slow
def test_a_kernel_beside_a_collective_runs_on_fewer_sms(tmp_path):
    traces = overlapping(tmp_path)
    free = simulate(traces, H100, RooflineDurations(), contention=False)
    contended = simulate(traces, H100, RooflineDurations())
    gemm_free, coll = free.devices[0][1], free.devices[0][0]
    end = free.result(0).end
    overlap = min(end[0], end[1]) - max(end[0] - coll, end[1] - gemm_free)
    assert overlap > 0.9 * coll  # the all-gather runs beside the GEMM
    sm_share = 24 / 132  # dgx-h100, the H100's default cluster, one node
    expected = gemm_free + overlap * (1 / (1 - sm_share) - 1)
    assert contended.devices[0][1] == pytest.approx(expected, abs=1)
    assert contended.devices[0][0] == coll  # the collective itself is not slowed
    assert summarize(contended).iteration_ns > summarize(free).iteration_ns


def test_measured_durations_already_hold_the_contention(tmp_path):
    traces = overlapping(tmp_path)
    measured = simulate(traces, H100, MeasuredDurations())
    assert measured.devices[0][1] == 1_000_000


def test_grouped_transfers_contend_too(tmp_path):
    """A send/recv pair launched as one NCCL group (pipeline stages exchanging activations) beside a GEMM."""
    b = TraceBuilder(2)
    b.communicator("pp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.group_start()
        k.send("pp", 1 - r, 0, stream=1)
        k.recv("pp", 1 - r, 0, stream=1)
        k.group_end()
        k.gemm(8192, 8192, 8192, 0)
        k.device_sync()
    traces = load(b.write(tmp_path / "run"))
    free = simulate(traces, H100, RooflineDurations(), contention=False)
    contended = simulate(traces, H100, RooflineDurations())
    gemm = 4  # group start, send, recv, group end, then the GEMM
    assert contended.devices[0][gemm] > free.devices[0][gemm]


class Burst(DurationProvider):
    """bf16 GEMMs at the H100 SXM's short-loop rate (MAMF finder, 794.5 TFLOP/s), collectives 2 ms: as models
    trained on short-loop timings price them."""

    name = "burst"
    prices_burst_kernels = True

    def device_ns(self, calls, hw):
        flops = calls["flops"].to_numpy(dtype="float64", na_value=np.nan)
        return np.where(calls["opcode"].to_numpy() == COLL, 2e6, flops / 794.5e12 * 1e9)


def long_steps(tmp_path):
    """Two ranks, three steps of 200 bf16 8192^3 GEMMs (0.28 s: the sustained regime), an all-gather beside the
    first GEMM of each step."""
    return load(overlapped_steps(tmp_path / "run", [("allgather", "dp", 1)], nelems=1 << 28, gemms=200, size=8192))


@pytest.mark.slow
def test_a_collective_lowers_the_power_capped_clock_of_the_gemm_beside_it(tmp_path):
    """On an H100 at its cap the GEMM beside the all-gather runs at 1575 of 1980 MHz (the overlap observation) on
    top of the SMs the collective holds; without the sustained clock, or on an A100, only the SMs count."""
    traces = long_steps(tmp_path)
    for hw, sustained, power in ((H100, True, True), (H100, False, False), (A100, True, False)):
        free = simulate(traces, hw, Burst(), contention=False, sustained_clock=sustained)
        contended = simulate(traces, hw, Burst(), sustained_clock=sustained)
        frame = free.programs[0].frame
        frame_gemms = np.flatnonzero((frame["family"] == "gemm").to_numpy())
        coll = np.flatnonzero(frame["collective"].notna().to_numpy())
        beside, alone = frame_gemms[-200], frame_gemms[-1]  # the last step's first and last GEMM
        end, device = free.result(0).end, free.devices[0]
        c = coll[-1]
        overlap = min(end[c], end[beside]) - max(end[c] - device[c], end[beside] - device[beside])
        assert overlap > 0
        factor = 1 / (1 - 24 / (hw.sm_count))  # one NVSwitch node: 24 channels
        if power:
            ratio = (8192**3 * 2 / 794.5e12 * 1e9) / device[alone]  # the sustained clock the step runs at
            assert 0.9 < ratio < 0.95
            factor *= ratio / (1575 / 1980)  # the reference's burst mix: the observed overlap clock itself
            assert any(n.startswith("power cap beside collectives") for n in contended.notes)
        else:
            assert not any(n.startswith("power cap beside collectives") for n in contended.notes)
        expected = device[beside] + overlap * (factor - 1)
        assert contended.devices[0][beside] == pytest.approx(expected, abs=2)
        assert contended.devices[0][alone] == device[alone]  # nothing beside it


class Slow(Burst):
    """bf16 GEMMs at 500 TFLOP/s on an H100 SXM: ~545 W at the burst clock, under the 700 W cap."""

    def device_ns(self, calls, hw):
        flops = calls["flops"].to_numpy(dtype="float64", na_value=np.nan)
        return np.where(calls["opcode"].to_numpy() == COLL, 2e6, flops / 500e12 * 1e9)


@pytest.mark.slow
def test_a_mix_under_the_cap_loses_only_what_the_collective_draws(tmp_path):
    """A step at 500 TFLOP/s (~545 W of 700) keeps its burst clock alone and beside the all-gather runs at the
    clock where its demand plus the collective's ~214 W meets the cap (~0.956), not at the observed 0.795."""
    traces = long_steps(tmp_path)
    free = simulate(traces, H100, Slow(), contention=False)
    contended = simulate(traces, H100, Slow())
    frame = free.programs[0].frame
    gemms = np.flatnonzero((frame["family"] == "gemm").to_numpy())
    beside, alone, c = gemms[-200], gemms[-1], np.flatnonzero(frame["collective"].notna().to_numpy())[-1]
    end, device = free.result(0).end, free.devices[0]
    assert device[alone] == round(8192**3 * 2 / 500e12 * 1e9)  # under the cap: the burst clock
    overlap = min(end[c], end[beside]) - max(end[c] - device[c], end[beside] - device[beside])
    a, reference_w = EXPONENT, REFERENCES[9].burst_power_w  # ~2.52, ~866 W
    demand = reference_w * 500 / 794.5
    collective_w = 700 - reference_w * (1575 / 1980) ** a  # the observation's cap less its compute's draw
    lowered = ((700 - collective_w) / demand) ** (1 / a)
    assert lowered == pytest.approx(0.956, abs=0.002)
    factor = 1 / (1 - 24 / 132) / lowered
    assert contended.devices[0][beside] == pytest.approx(device[beside] + overlap * (factor - 1), abs=2)
    assert any("run at 0.956 x" in n and "not at their burst clock" in n for n in contended.notes)


def test_a_mix_far_under_the_cap_keeps_its_clock_and_gets_no_note():
    """An H20-class demand (152 W of a 400 W cap) plus a collective's share stays under the cap: ratio 1."""
    h20 = hardware.get("h20")
    clock = SustainedClock(demand_w=152.0, cap_w=h20.tdp_w, ratio=1.0)
    assert overlap_ratio(clock, h20) == 1.0
    assert overlap_ratio(SustainedClock(866.0, 700.0, 0.92), A100) is None  # no overlap observation on Ampere


@pytest.mark.slow
def test_the_clock_term_counts_a_kernel_once_beside_two_collectives(tmp_path):
    """A GEMM beside a TP all-gather and a DP all-reduce on two streams at once: the SMs of each count, the
    lowered clock once over the time either runs (not once per collective)."""
    collectives = [("allgather", "tp", 1), ("allreduce", "dp", 2)]
    traces = load(overlapped_steps(tmp_path / "run", collectives, nelems=1 << 28, gemms=200, size=8192))
    free = simulate(traces, H100, Burst(), contention=False)
    contended = simulate(traces, H100, Burst())
    frame = free.programs[0].frame
    gemms = np.flatnonzero((frame["family"] == "gemm").to_numpy())
    colls = np.flatnonzero(frame["collective"].notna().to_numpy())[-2:]
    beside, alone = gemms[-200], gemms[-1]
    end, device = free.result(0).end, free.devices[0]
    spans = [(end[c] - device[c], end[c]) for c in colls]
    start, stop = end[beside] - device[beside], end[beside]
    overlaps = [min(stop, e) - max(start, s) for s, e in spans]
    assert all(o > 0 for o in overlaps)
    union = min(stop, max(e for _, e in spans)) - max(start, min(s for s, _ in spans))
    assert union < sum(overlaps)  # the two collectives run at the same time
    ratio = (8192**3 * 2 / 794.5e12 * 1e9) / device[alone]
    sm = 24 / 132
    contention = sum(overlaps) * (1 / (1 - sm) - 1)
    expected = device[beside] + contention + (union + contention) * (ratio / (1575 / 1980) - 1)
    assert contended.devices[0][beside] == pytest.approx(expected, abs=3)
