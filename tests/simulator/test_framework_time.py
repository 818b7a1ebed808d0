"""Framework host time read from an emulated trace (`durations.framework`) and added to the host timeline."""

import json

import numpy as np
import pandas as pd
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware
from maya.core.clusters import ClusterSpecError, parse_cluster
from maya.simulator import simulate, summarize
from maya.simulator.durations import HOST_NS, MeasuredDurations, RooflineDurations
from maya.simulator.durations.framework import (
    MODULE_HOOK_NS,
    OBSERVER_OP_NS,
    OUTLIER_FACTOR,
    TRITON_NOTE_NS,
    emulated,
    emulation_overhead_ns,
    framework_ns,
    has_cpu_clock,
)
from maya.simulator.iterations import Iterations
from maya.simulator.opcodes import NOP, WORK, classify
from maya.simulator.simulation import host_factor
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

MAIN, WATCHDOG = 1, 2


def calls_frame(rows: list[tuple]) -> pd.DataFrame:
    """api_calls rows from (thread, api, start_ns, duration_ns, op_id)."""
    frame = pd.DataFrame(rows, columns=["thread_id", "api", "start_ns", "duration_ns", "op_id"])
    frame["domain"] = "runtime"
    frame["memcpy_kind"] = None
    frame["collective_name"] = None
    frame["args"] = None
    return frame


def opcodes(calls: pd.DataFrame) -> np.ndarray:
    """Launches are device work; anything else is not."""
    return np.where(calls["api"] == "cudaLaunchKernel", WORK, NOP)


def ops_frame(rows: list[tuple]) -> pd.DataFrame:
    """ops rows from (op_id, thread, name, start_ns)."""
    return pd.DataFrame(rows, columns=["op_id", "thread_id", "name", "start_ns"])


def test_a_gap_the_recording_explains_is_no_framework_time():
    calls = calls_frame([(MAIN, "cudaLaunchKernel", 0, 100, 1), (MAIN, "cudaLaunchKernel", 100 + 2 * 3_000, 100, 2)])
    ops = ops_frame([(1, MAIN, "aten::add_", 0), (2, MAIN, "aten::add_", 100 + 3_000)])
    # the second call's gap: one op recorded (3 us) and 3 us of its own
    second = 100 + 3_000 - 1  # the op opens after the first call's end
    ops.loc[1, "start_ns"] = second
    out = framework_ns(calls, ops, opcodes(calls), None)
    assert out[0] == 0.0
    assert out[1] == pytest.approx(2 * 3_000 - OBSERVER_OP_NS)
    # a gap holding only recording costs is no framework time at all
    busy = ops_frame([(1, MAIN, "aten::add_", 0), (2, MAIN, "nn.Module: M", 200), (3, MAIN, "aten::add_", 300)])
    calls.loc[1, "start_ns"] = 100 + int(emulation_overhead_ns(2, 1, 0))
    assert framework_ns(calls, busy, opcodes(calls), None)[1] == 0.0


def test_writing_a_graph_launchs_replayed_rows_is_no_framework_time():
    calls = calls_frame(
        [
            (MAIN, "cudaGraphLaunch", 0, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 2_000, 0, np.nan),  # replayed rows, written 2 and 5 us on
            (MAIN, "cudaLaunchKernel", 5_000, 0, np.nan),
            (MAIN, "cudaLaunchKernel", 6_000, 100, np.nan),  # the next call: 1 us of the script's own
        ]
    )
    calls.loc[1:2, "domain"] = "device"
    codes = np.where(calls["api"] == "cudaGraphLaunch", WORK, opcodes(calls))
    assert framework_ns(calls, ops_frame([]), codes, None).tolist() == [0.0, 0.0, 0.0, 1_000.0]


def test_emulation_overhead_counts_each_kind_of_record():
    assert emulation_overhead_ns(3, 1, 2) == pytest.approx(2 * OBSERVER_OP_NS + MODULE_HOOK_NS + 2 * TRITON_NOTE_NS)


def test_threads_that_issue_no_device_work_and_preemption_are_left_out():
    """The watchdog's calls carry none; a steady iteration in which a call's gap was preempted takes the other
    steady iteration's; the first (warm-up) iteration gets none."""
    rows, t = [], 0
    for extra in (7_000, 50_000, 0):  # iteration 1 was preempted before its launch
        rows.append((MAIN, "cudaLaunchKernel", t, 100, np.nan))
        t += 100 + 1_000
        rows.append((WATCHDOG, "cudaEventQuery", t, 100, np.nan))
        t += 100 + 1_000 + extra
    rows.append((MAIN, "cudaLaunchKernel", t, 100, np.nan))
    calls = calls_frame(rows)
    iterations = Iterations(np.array([0, 3, 5, 7]), np.array([1, 2]), "ops")
    out = framework_ns(calls, ops_frame([]), opcodes(calls), iterations)
    watchdog = (calls["thread_id"] == WATCHDOG).to_numpy()
    assert (out[watchdog] == 0).all()
    launches = out[~watchdog]
    assert launches[1] == 0.0  # warm-up
    assert launches[2] == launches[3] == 1_000 + 100 + 1_000  # not 52,100: the shorter of the two


def test_a_preempted_gap_in_every_iteration_is_cut_to_its_kind_s_typical_one():
    """Among many launches of one kind, one preempted in every steady iteration is cut to `OUTLIER_FACTOR` times
    their median."""
    rows, t = [], 0
    for iteration in range(3):
        for k in range(10):
            t += 1_000 + (1_000_000 if k == 4 and iteration else 0)
            rows.append((MAIN, "cudaLaunchKernel", t, 0, np.nan))
    calls = calls_frame(rows)
    out = framework_ns(
        calls, ops_frame([]), opcodes(calls), Iterations(np.array([0, 10, 20, 30]), np.array([1, 2]), "ops")
    )
    assert out[14] == out[24] == pytest.approx(OUTLIER_FACTOR * 1_000)
    assert out[15] == 1_000


def builder_trace(tmp_path, gap_ns: int, kernel_ns: int = 2_000, n: int = 50, time_source: str = "emulated"):
    """One rank launching `n` kernels of `kernel_ns` with `gap_ns` of framework time before each, timed by
    `time_source`."""
    b = TraceBuilder(1, hardware="h100-sxm")
    r = b.rank(0)
    for _ in range(n):
        r.clock += gap_ns
        r.kernel(kernel_ns)
    r.stream_sync()
    path = b.write(tmp_path / "run")
    run = load(path)
    for trace in run.ranks.values():
        trace.calls["time_source"] = time_source
    return run


@pytest.mark.slow
def test_a_host_bound_loop_is_predicted_at_the_host_s_pace(tmp_path, monkeypatch):
    """Kernels shorter than the host time between their launches: the step (one launch: the loop repeats) is the
    host's, and the breakdown says the GPU waited on it."""
    gap = 20_000
    run = builder_trace(tmp_path, gap)
    monkeypatch.setenv("MAYA_HOST_FACTOR", "1")
    sim = simulate(run, hardware.get("h100-sxm"), RooflineDurations(unknown_kernel_ns=2_000))
    p = summarize(sim)
    assert p.iteration_ns == pytest.approx(gap + HOST_NS["launch"], rel=0.05)
    assert p.host_bound_ns > 0.8 * p.iteration_ns
    assert any("framework host time" in n for n in p.notes)
    monkeypatch.setenv("MAYA_HOST_FACTOR", "0.5")
    half = summarize(simulate(run, hardware.get("h100-sxm"), RooflineDurations(unknown_kernel_ns=2_000)))
    assert half.iteration_ns == pytest.approx(gap / 2 + HOST_NS["launch"], rel=0.05)
    monkeypatch.delenv("MAYA_HOST_FACTOR")  # the default: read and reported, not added
    off = summarize(simulate(run, hardware.get("h100-sxm"), RooflineDurations(unknown_kernel_ns=2_000)))
    assert off.iteration_ns == pytest.approx(HOST_NS["launch"], rel=0.05)
    assert any("not added to the prediction" in n for n in off.notes)


def test_measured_host_times_get_no_framework_time_added(tmp_path, monkeypatch):
    """A measured trace's gaps are its framework time already: replayed as measured, nothing is added."""
    run = builder_trace(tmp_path, 20_000)
    monkeypatch.setenv("MAYA_HOST_FACTOR", "1")
    with_framework = simulate(run, hardware.get("h100-sxm"), MeasuredDurations())
    assert with_framework.host_factor == 0.0
    host = with_framework.programs[0].host
    assert host.sum() == pytest.approx(MeasuredDurations().host_ns(with_framework.programs[0].frame).sum())


def test_a_measured_trace_priced_by_a_model_gets_no_framework_time(tmp_path, monkeypatch):
    """A profiler's (or Kineto's) trace priced by the roofline: its gaps were timed on the GPU's own host, not the
    emulating CPU, so the host factor adds nothing and no note reads framework time from it."""
    run = builder_trace(tmp_path, 20_000, time_source="measured")
    h100 = hardware.get("h100-sxm")
    predicted = {}
    for factor in ("0", "1"):
        monkeypatch.setenv("MAYA_HOST_FACTOR", factor)
        sim = simulate(run, h100, RooflineDurations(unknown_kernel_ns=2_000))
        assert sim.host_factor == 0.0
        assert not sim.programs[0].frame["framework_ns"].any()
        p = summarize(sim)
        assert not any("framework host time" in n for n in p.notes)
        predicted[factor] = p.iteration_ns
    assert predicted["1"] == predicted["0"]


def test_the_run_s_source_stands_for_calls_that_state_no_time_source():
    calls = pd.DataFrame({"time_source": ["emulated", "measured", None]})
    assert emulated(calls).tolist() == [True, False, False]
    assert emulated(calls, "emulator").tolist() == [True, False, True]
    assert emulated(calls.drop(columns="time_source"), "emulator").tolist() == [True] * 3
    assert not emulated(calls.drop(columns="time_source"), "kineto-import").any()


def test_price_adds_no_framework_time_unless_asked():
    """`price`'s default host factor is 0, as documented: framework time is read, not added."""
    import inspect

    from maya.simulator.pricing import price

    assert inspect.signature(price).parameters["host_factor"].default == 0.0


def test_the_host_factor_comes_from_the_switch_then_the_cluster(monkeypatch):
    h100 = hardware.get("h100-sxm")
    monkeypatch.delenv("MAYA_HOST_FACTOR", raising=False)
    assert host_factor(None, h100) == (0.0, "not stated")
    monkeypatch.setenv("MAYA_HOST_FACTOR", "0.8")
    assert host_factor(None, h100) == (0.8, "MAYA_HOST_FACTOR")
    monkeypatch.setenv("MAYA_HOST_FACTOR", "fast")
    with pytest.raises(ValueError, match="MAYA_HOST_FACTOR='fast' is not a factor"):
        host_factor(None, h100)
    raw = {"name": "n", "gpus_per_node": 8, "pcie": {"generation": 5}, "host_factor": 0.7}
    assert parse_cluster(raw).host_factor == 0.7
    with pytest.raises(ClusterSpecError, match="host_factor must be a number above 0"):
        parse_cluster(raw | {"host_factor": -1})


def test_a_cluster_file_s_host_factor_stands_when_the_switch_is_unset(tmp_path, monkeypatch):
    h100 = hardware.get("h100-sxm")
    spec = tmp_path / "slow-hosts.json"
    spec.write_text(
        json.dumps(
            {
                "name": "slow-hosts",
                "hardware": "h100-sxm",
                "gpus_per_node": 8,
                "pcie": {"generation": 5},
                "host_factor": 1.5,
            }
        )
    )
    monkeypatch.delenv("MAYA_HOST_FACTOR", raising=False)
    assert host_factor(str(spec), h100) == (1.5, "cluster slow-hosts")
    monkeypatch.setenv("MAYA_HOST_FACTOR", "0")  # the switch wins over the file
    assert host_factor(str(spec), h100) == (0.0, "MAYA_HOST_FACTOR")


@pytest.mark.slow
@pytest.mark.e2e
def test_a_loop_that_does_nothing_between_launches_has_no_framework_time(tmp_path, maya_home):
    """Emulated: back-to-back `cudaMemsetAsync` from a bare ctypes loop reads far less framework time than eager
    `add_` (ATen's dispatch between launches): the recording's own cost is not counted. The bound is loose: the bare
    loop's figure depends on the machine's load (`benchmarks/host_overhead.py RUN` prints it)."""
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "host_gaps.py")])
    assert r.exit_code == 0, r.output
    trace = load(out).ranks[0]
    calls = trace.calls
    framework = framework_ns(calls, trace.ops, classify(calls), None)
    bare = np.median(framework[(calls["api"] == "cudaMemsetAsync").to_numpy() & calls["op_id"].isna().to_numpy()])
    eager = np.median(framework[(calls["api"] == "cudaLaunchKernel").to_numpy()])
    assert bare < HOST_NS["launch"]  # a ctypes loop's few hundred ns, with room for a loaded machine (1.1 us seen)
    assert eager > 2 * bare


def test_validation_re_predicts_rows_when_the_host_factor_changes(monkeypatch):
    from maya.validation.plan import predictor_digest

    monkeypatch.delenv("MAYA_HOST_FACTOR", raising=False)
    default = predictor_digest()
    for same in ("0", "0.0"):  # what the factor resolves to, not how it is spelled
        monkeypatch.setenv("MAYA_HOST_FACTOR", same)
        assert predictor_digest() == default
    monkeypatch.setenv("MAYA_HOST_FACTOR", "1")
    assert predictor_digest() != default


def with_cpu_clock(calls: pd.DataFrame, cpu: list[tuple[int, int]]) -> pd.DataFrame:
    """`calls` with the issuing threads' CPU clock (spec 1.7): (cpu_start_ns, cpu_duration_ns) per row."""
    calls = calls.copy()
    calls["cpu_start_ns"] = [c[0] for c in cpu]
    calls["cpu_duration_ns"] = [c[1] for c in cpu]
    return calls


def test_a_thread_that_sleeps_between_two_calls_reads_only_its_cpu_time():
    """20 ms of wall gap, 50 us of it on the thread's CPU (it slept the rest): the CPU clock reads 50 us; the wall
    gap read it all. A busy loop between two calls reads its CPU time under both."""
    calls = calls_frame(
        [
            (MAIN, "cudaLaunchKernel", 0, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 20_000_100, 100, np.nan),  # slept 20 ms
            (MAIN, "cudaLaunchKernel", 25_000_200, 100, np.nan),  # spun 5 ms
        ]
    )
    cpu = with_cpu_clock(calls, [(1_000, 100), (1_000 + 100 + 50_000, 100), (1_000 + 200 + 50_000 + 5_000_000, 100)])
    assert framework_ns(cpu, ops_frame([]), opcodes(cpu), None).tolist() == [0.0, 50_000.0, 5_000_000.0]
    assert framework_ns(calls, ops_frame([]), opcodes(calls), None).tolist() == [0.0, 20_000_000.0, 5_000_000.0]


def test_a_handoff_between_threads_reads_each_thread_s_own_cpu_time():
    """The main thread hands over to the autograd thread and waits: the wall gap before each thread's next call holds
    the other's work and the wake-up; the CPU clock counts each thread's own time since its previous call."""
    autograd = 3
    calls = calls_frame(
        [
            (MAIN, "cudaLaunchKernel", 0, 100, np.nan),
            (autograd, "cudaLaunchKernel", 1_000_100, 100, np.nan),  # 1 ms of wake-up, 10 us of its own
            (autograd, "cudaLaunchKernel", 1_010_200, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 3_000_300, 100, np.nan),  # woken 2 ms after; 20 us of its own
        ]
    )
    cpu = with_cpu_clock(calls, [(500, 100), (7_000, 100), (7_000 + 100 + 10_000, 100), (500 + 100 + 20_000, 100)])
    assert framework_ns(cpu, ops_frame([]), opcodes(cpu), None).tolist() == [0.0, 0.0, 10_000.0, 20_000.0]
    assert framework_ns(calls, ops_frame([]), opcodes(calls), None)[[2, 3]].tolist() == [10_000.0, 1_990_000.0]


def test_a_thread_id_given_again_to_a_new_thread_starts_its_clock_afresh():
    """A thread ended and the kernel gave its id to a new one, whose CPU clock starts again near 0: its first call
    reads no framework time and its next one its own 30 us, not 0 from the old thread's higher readings."""
    calls = calls_frame(
        [
            (MAIN, "cudaLaunchKernel", 0, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 1_000_100, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 9_000_000, 100, np.nan),  # the new thread's first call
            (MAIN, "cudaLaunchKernel", 9_040_100, 100, np.nan),
        ]
    )
    cpu = with_cpu_clock(calls, [(5_000_000, 100), (5_900_100, 100), (2_000, 100), (2_000 + 100 + 30_000, 100)])
    assert framework_ns(cpu, ops_frame([]), opcodes(cpu), None).tolist() == [0.0, 900_000.0, 0.0, 30_000.0]


def test_the_recording_s_costs_are_taken_off_the_cpu_time_of_the_thread_that_recorded_them():
    """Ops recorded on another thread during the gap are not this thread's; its own are taken off."""
    other = 3
    calls = calls_frame([(MAIN, "cudaLaunchKernel", 0, 100, 1), (MAIN, "cudaLaunchKernel", 100_000, 100, 2)])
    cpu = with_cpu_clock(calls, [(0, 100), (100 + 10_000, 100)])
    ops = ops_frame([(1, MAIN, "aten::add_", 50_000), (2, other, "aten::add_", 60_000), (3, other, "aten::mul", 0)])
    assert framework_ns(cpu, ops, opcodes(cpu), None)[1] == pytest.approx(10_000 - OBSERVER_OP_NS)


def test_a_graph_launch_s_replayed_rows_end_the_gap_at_the_last_one_s_cpu_clock():
    """Replayed rows carry no CPU clock but the last (written once all were): the next gap starts there."""
    calls = calls_frame(
        [
            (MAIN, "cudaGraphLaunch", 0, 100, np.nan),
            (MAIN, "cudaLaunchKernel", 2_000, 0, np.nan),
            (MAIN, "cudaLaunchKernel", 5_000, 0, np.nan),
            (MAIN, "cudaLaunchKernel", 6_000, 100, np.nan),
        ]
    )
    calls.loc[1:2, "domain"] = "device"
    cpu = with_cpu_clock(calls, [(0, 100), (np.nan, np.nan), (4_000, 0), (4_700, 100)])
    codes = np.where(calls["api"] == "cudaGraphLaunch", WORK, opcodes(calls))
    assert framework_ns(cpu, ops_frame([]), codes, None).tolist() == [0.0, 0.0, 0.0, 700.0]


def test_under_the_cpu_clock_a_long_gap_in_every_iteration_is_not_cut():
    """CPU time holds no other process's time slices: a gap much longer than its kind's in every steady iteration
    (data loading before a copy, every step) is the script's own, not cut to `OUTLIER_FACTOR` times their median. A
    loaded CPU only ever adds to a call's CPU time (cold caches, a busy sibling core): the shortest over the steady
    iterations stays."""
    rows, cpu, t = [], [], 0
    for iteration in range(4):
        for k in range(10):
            own = 1_000 + (1_000_000 if k == 4 else 0) + 100 * iteration
            t += 10_000_000  # wall gaps: whatever else ran
            rows.append((MAIN, "cudaLaunchKernel", t, 0, np.nan))
            cpu.append(((cpu[-1][0] if cpu else 0) + own, 0))
    calls = with_cpu_clock(calls_frame(rows), cpu)
    iterations = Iterations(np.array([0, 10, 20, 30, 40]), np.array([1, 2, 3]), "ops")
    out = framework_ns(calls, ops_frame([]), opcodes(calls), iterations)
    assert (out[:10] == 0).all()  # warm-up
    assert out[14] == out[24] == out[34] == 1_000_000 + 1_000 + 100  # not cut to 3x its kind's median
    assert out[15] == out[25] == 1_100  # the shortest of 1,100, 1,200 and 1,300


def test_a_trace_without_the_cpu_clock_reads_as_before():
    """Spec 1.6 traces (no column) and 1.7 ones whose rows carry no reading read the wall gaps, robustly."""
    rows, t = [], 0
    for extra in (7_000, 50_000, 0):
        rows.append((MAIN, "cudaLaunchKernel", t, 100, np.nan))
        t += 100 + 1_000 + extra
    rows.append((MAIN, "cudaLaunchKernel", t, 100, np.nan))
    calls = calls_frame(rows)
    iterations = Iterations(np.array([0, 1, 2, 4]), np.array([1, 2]), "ops")
    before = framework_ns(calls, ops_frame([]), opcodes(calls), iterations)
    null = with_cpu_clock(calls, [(None, None)] * len(calls))
    null[["cpu_start_ns", "cpu_duration_ns"]] = null[["cpu_start_ns", "cpu_duration_ns"]].astype("Int64")
    assert before.tolist() == [0.0, 8_000.0, 8_000.0, 1_000.0]  # the 51 us gap: the shortest of its call's
    assert framework_ns(null, ops_frame([]), opcodes(null), iterations).tolist() == before.tolist()


@pytest.mark.slow
@pytest.mark.e2e
def test_an_emulated_thread_s_sleep_is_no_framework_time_and_its_spin_is(tmp_path, maya_home):
    """Emulated (calls carry the CPU clock): the 20 ms the script sleeps between two launches read as far less than
    a millisecond, the 5 ms it spins as at least 5 ms; the wall gaps held both."""
    out = tmp_path / "run"
    script = str(WORKLOADS / "sleep_and_spin.py")
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", script])
    assert r.exit_code == 0, r.output
    trace = load(out).ranks[0]
    calls = trace.calls
    assert has_cpu_clock(calls)
    launches = np.flatnonzero((calls["api"] == "cudaLaunchKernel").to_numpy())
    cpu = framework_ns(calls, trace.ops, classify(calls), None)[launches]
    wall = framework_ns(calls.drop(columns=["cpu_start_ns", "cpu_duration_ns"]), trace.ops, classify(calls), None)
    assert len(launches) == 3
    assert wall[launches[1]] >= 20e6 and cpu[1] < 1e6  # slept
    assert 5e6 <= cpu[2] <= wall[launches[2]]  # spun
