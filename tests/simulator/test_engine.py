"""Simulator semantics on small synthetic traces: streams, event versions, host synchronisation,
collectives (stragglers, p2p pairing, groups), deduplicated ranks, pipeline bubbles, iterations."""

import numpy as np
import pytest
from paths import FIXTURES

from maya.core import hardware
from maya.estimators import CollectiveModel
from maya.simulator import (
    CollectiveDurations,
    Deadlock,
    MeasuredDurations,
    MissingRanks,
    RooflineDurations,
    simulate,
    summarize,
)
from maya.simulator.iterations import find_period
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder

H100 = hardware.get("h100-sxm")
US = 1_000


def run(builder: TraceBuilder, tmp_path, name="run"):
    return simulate(load(builder.write(tmp_path / name)), H100, MeasuredDurations())


def device_interval(sim, rank, seq):
    res = sim.result(rank)
    p = next(r.program for r in sim.replicas if r.rank == rank)
    return int(res.end[seq] - p.device[seq]), int(res.end[seq])


def test_one_stream_runs_in_issue_order_after_the_host_issues(tmp_path):
    b = TraceBuilder(1, host_ns=1 * US)
    k = b.rank(0)
    k.kernel(10 * US)
    k.kernel(10 * US)
    k.host()
    sim = run(b, tmp_path)
    assert device_interval(sim, 0, 0) == (1 * US, 11 * US)  # ready when its launch returns
    assert device_interval(sim, 0, 1) == (11 * US, 21 * US)  # queued behind the first
    assert sim.result(0).issue.tolist() == [1 * US, 2 * US, 3 * US]  # the host ran ahead


def test_streams_overlap_unless_an_event_orders_them(tmp_path):
    b = TraceBuilder(1)
    k = b.rank(0)
    k.kernel(50 * US, stream=7)  # 0
    k.kernel(5 * US, stream=0)  # 1: independent, overlaps
    k.record(1, stream=7)  # 2
    k.wait(0, 1)  # 3: stream 0 waits for stream 7's work so far
    k.kernel(5 * US, stream=0)  # 4
    sim = run(b, tmp_path)
    assert device_interval(sim, 0, 1) == (0, 5 * US)
    assert device_interval(sim, 0, 4) == (50 * US, 55 * US)


def test_a_wait_targets_the_event_version_recorded_before_it(tmp_path):
    b = TraceBuilder(1)
    k = b.rank(0)
    k.kernel(10 * US, stream=1)  # 0
    k.record(9, stream=1)  # 1: version 0 completes at 10 us
    k.wait(0, 9)  # 2: waits for version 0 only
    k.kernel(1 * US, stream=0)  # 3
    k.kernel(100 * US, stream=1)  # 4
    k.record(9, stream=1)  # 5: version 1 completes at 110 us (event reused)
    k.wait(0, 9)  # 6
    k.kernel(1 * US, stream=0)  # 7
    k.event_sync(9)  # 8: the host waits for version 1
    k.host()  # 9
    sim = run(b, tmp_path)
    assert device_interval(sim, 0, 3) == (10 * US, 11 * US)
    assert device_interval(sim, 0, 7) == (110 * US, 111 * US)
    assert sim.result(0).issue[9] == 110 * US


def test_a_wait_queued_behind_a_pending_record_resolves_when_the_record_runs(tmp_path):
    b = TraceBuilder(2)
    b.communicator("c", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.kernel((100 if r else 1) * US, stream=0)
        k.allreduce("c", 10 * US, stream=0)  # rank 0 waits here for rank 1
        k.record(3, stream=0)
        k.wait(5, 3)
        k.kernel(2 * US, stream=5)
    sim = run(b, tmp_path)
    assert device_interval(sim, 0, 4) == (110 * US, 112 * US)


@pytest.mark.parametrize("sync", ["stream", "event", "device", "dtoh"])
def test_host_synchronisation_blocks_until_the_work_is_done(tmp_path, sync):
    b = TraceBuilder(1, host_ns=1 * US)
    k = b.rank(0)
    k.kernel(100 * US, stream=3)
    k.record(4, stream=3)
    if sync == "stream":
        k.stream_sync(3)
    elif sync == "event":
        k.event_sync(4)
    elif sync == "device":
        k.device_sync()
    else:
        k.memcpy(8, "DtoH", 2 * US, stream=3)
    k.host()
    sim = run(b, tmp_path)
    done = 103 * US if sync == "dtoh" else 101 * US
    assert sim.result(0).issue[3] == done + 1 * US
    assert sim.result(0).wait.sum() > 0


@pytest.mark.slow
def test_collectives_wait_for_the_straggler_and_finish_together(tmp_path):
    b = TraceBuilder(3)
    b.communicator("dp", [0, 1, 2])
    for r in range(3):
        k = b.rank(r)
        k.kernel((500 if r == 2 else 10) * US)
        k.allreduce("dp", 50 * US)
        k.kernel(10 * US)
    sim = run(b, tmp_path)
    for r in range(3):
        res = sim.result(r)
        assert res.launch_end.tolist() == [550 * US]
        assert res.launch_start.tolist() == [(500 if r == 2 else 10) * US]
        assert res.launch_ready.tolist() == [500 * US]  # when the straggler arrived
        assert device_interval(sim, r, 2) == (550 * US, 560 * US)
    reports = {r.rank: r for r in summarize(sim).ranks}
    assert reports[0].exposed_comm_ns == 50 * US  # the all-reduce itself
    assert reports[0].peer_wait_ns == 490 * US  # waiting for rank 2 is not communication
    assert reports[2].exposed_comm_ns == 50 * US and reports[2].peer_wait_ns == 0


@pytest.mark.slow
def test_collectives_match_by_communicator_and_sequence(tmp_path):
    b = TraceBuilder(4)
    b.communicator("a", [0, 1])
    b.communicator("b", [2, 3])
    b.communicator("all", [0, 1, 2, 3])
    for r in range(4):
        k = b.rank(r)
        k.kernel((r + 1) * 10 * US)
        k.allreduce("a" if r < 2 else "b", 5 * US)
        k.allreduce("all", 7 * US)
    sim = run(b, tmp_path)
    assert sim.result(0).launch_end[0] == sim.result(1).launch_end[0] == 25 * US
    assert sim.result(2).launch_end[0] == sim.result(3).launch_end[0] == 45 * US
    assert {int(sim.result(r).launch_end[1]) for r in range(4)} == {52 * US}


def test_p2p_send_recv_pair_in_order(tmp_path):
    b = TraceBuilder(2)
    b.communicator("pp", [0, 1])
    s, r = b.rank(0), b.rank(1)
    s.kernel(10 * US)
    s.send("pp", 1, 3 * US)  # pairs with the first recv
    s.kernel(40 * US)
    s.send("pp", 1, 3 * US)  # pairs with the second
    r.recv("pp", 0, 3 * US)
    r.recv("pp", 0, 3 * US)
    r.kernel(1 * US)
    sim = run(b, tmp_path)
    assert sim.result(0).launch_end.tolist() == [13 * US, 56 * US]
    assert sim.result(1).launch_start.tolist() == [0, 13 * US]
    assert sim.result(1).launch_end.tolist() == [13 * US, 56 * US]
    assert device_interval(sim, 1, 2) == (56 * US, 57 * US)


def _exchange(b: TraceBuilder, grouped: bool) -> None:
    b.communicator("pp", [0, 1])
    for me, peer in ((0, 1), (1, 0)):
        k = b.rank(me)
        k.kernel(10 * US * (me + 1))
        if grouped:
            k.group_start()
        k.send("pp", peer, 4 * US)
        k.recv("pp", peer, 4 * US)
        if grouped:
            k.group_end()
        k.kernel(1 * US)


def test_grouped_send_recv_launch_together(tmp_path):
    b = TraceBuilder(2)
    _exchange(b, grouped=True)
    sim = run(b, tmp_path)
    for r in (0, 1):
        assert sim.result(r).launch_end.tolist() == [24 * US]
        assert len(sim.replicas[r].program.launches[0]) == 2
    assert device_interval(sim, 1, 5) == (24 * US, 25 * US)


def test_ungrouped_blocking_exchange_deadlocks_with_a_clear_error(tmp_path):
    b = TraceBuilder(2)
    _exchange(b, grouped=False)
    with pytest.raises(Deadlock, match="p2p"):
        run(b, tmp_path)


def test_a_collective_a_member_never_calls_is_reported(tmp_path):
    b = TraceBuilder(3)
    b.communicator("dp", [0, 1, 2])
    for r in range(3):
        k = b.rank(r)
        if r != 2:
            k.allreduce("dp", 5 * US)
        k.stream_sync()
    with pytest.raises(Deadlock, match=r"collective #0 on dp: ranks \[0, 1\] arrived, \[2\] never did"):
        run(b, tmp_path)


def _tp_dp(b: TraceBuilder, ranks, represents=None, odd_us=30) -> None:
    """World 4: tensor-parallel pairs [0,1], [2,3] on comm `tp`; data parallel [0,2], [1,3] on `dp`."""
    for r in ranks:
        tp = [0, 1] if r < 2 else [2, 3]
        dp = [0, 2] if r % 2 == 0 else [1, 3]
        b.communicator(f"tp{tp[0]}", tp)
        b.communicator(f"dp{dp[0]}", dp)
        k = b.rank(r, represents=represents(r) if represents else None)
        for it in range(3):
            k.iteration = it
            k.kernel((odd_us if r % 2 else 20) * US)
            k.allreduce(f"tp{tp[0]}", 5 * US)
            k.kernel(10 * US)
            k.allreduce(f"dp{dp[0]}", 40 * US, stream=1)
            k.stream_sync(1)


@pytest.mark.slow
def test_deduplicated_ranks_replay_their_representative_with_ranks_mapped(tmp_path):
    full = TraceBuilder(4)
    _tp_dp(full, range(4))
    dedup = TraceBuilder(4)
    _tp_dp(dedup, (0, 1), represents=lambda r: [r, r + 2])
    a, d = run(full, tmp_path, "full"), run(dedup, tmp_path, "dedup")
    assert [r.rank for r in d.replicas] == [0, 1, 2, 3]
    assert [r.captured for r in d.replicas] == [True, True, False, False]
    for r in range(4):
        np.testing.assert_array_equal(a.result(r).end, d.result(r).end)
        np.testing.assert_array_equal(a.result(r).launch_end, d.result(r).launch_end)
    assert summarize(a).iteration_ns == summarize(d).iteration_ns


@pytest.mark.slow
def test_one_rank_standing_for_its_tensor_and_data_parallel_peers(tmp_path):
    """Rank 0 represents all four ranks (mesh order: data parallel major, tensor parallel minor): its
    own copies fill its groups, each copy in rank 0's role."""
    full = TraceBuilder(4)
    _tp_dp(full, range(4), odd_us=20)
    dedup = TraceBuilder(4)
    _tp_dp(dedup, (0,), represents=lambda r: [0, 1, 2, 3], odd_us=20)
    a, d = run(full, tmp_path, "full"), run(dedup, tmp_path, "dedup")
    groups = {rep.rank: [d.comms[g].members for g in rep.comms] for rep in d.replicas}
    assert groups == {0: [(0, 1), (0, 2)], 1: [(0, 1), (1, 3)], 2: [(2, 3), (0, 2)], 3: [(2, 3), (1, 3)]}
    for r in range(4):
        np.testing.assert_array_equal(a.result(r).launch_end, d.result(r).launch_end)


@pytest.mark.slow
def test_deduplicated_copies_keep_their_own_stragglers_apart(tmp_path):
    """Rank 2 replays rank 0; its TP group is [2, 3] (not [0, 1]), so rank 0's TP allreduce does not
    wait for rank 3."""
    b = TraceBuilder(4)
    _tp_dp(b, (0, 1), represents=lambda r: [r, r + 2])
    sim = run(b, tmp_path)
    keys = {rep.rank: rep.keys[0][0][0] for rep in sim.replicas}
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    dp = {rep.rank: rep.keys[1][0][0] for rep in sim.replicas}
    assert dp[0] == dp[2] and dp[1] == dp[3] and dp[0] != dp[1]


def test_missing_communicator_members_are_named(tmp_path):
    b = TraceBuilder(4)
    _tp_dp(b, (0, 1))
    with pytest.raises(MissingRanks, match=r"dp0: rank\(s\) 2.*dp1: rank\(s\) 3"):
        run(b, tmp_path)


def _one_f_one_b(b: TraceBuilder, p: int, m: int, fwd: int, bwd: int, iterations: int) -> None:
    """Megatron's non-interleaved 1F1B schedule, p2p exchanges grouped as in batch_isend_irecv."""
    b.communicator("pp", list(range(p)))
    for s in range(p):
        k = b.rank(s)

        def exchange(*ops):
            ops = [op for op in ops if op]
            if ops:
                k.group_start()
                for kind, peer in ops:
                    (k.send if kind == "send" else k.recv)("pp", peer, 10)
                k.group_end()

        recv_f = ("recv", s - 1) if s > 0 else None
        send_f = ("send", s + 1) if s < p - 1 else None
        recv_b = ("recv", s + 1) if s < p - 1 else None
        send_b = ("send", s - 1) if s > 0 else None
        for it in range(iterations):
            k.iteration = it
            warmup = min(p - s - 1, m)
            for _ in range(warmup):
                exchange(recv_f)
                k.kernel(fwd)
                exchange(send_f)
            if m - warmup:
                exchange(recv_f)
            for i in range(m - warmup):
                k.kernel(fwd)
                exchange(send_f, recv_b)
                k.kernel(bwd)
                exchange(send_b, recv_f if i < m - warmup - 1 else None)
            for _ in range(warmup):
                exchange(recv_b)
                k.kernel(bwd)
                exchange(send_b)
            k.device_sync()


@pytest.mark.parametrize(
    "p,m", [pytest.param(4, 8, marks=pytest.mark.slow), pytest.param(8, 16, marks=pytest.mark.slow), (2, 1)]
)
def test_pipeline_bubble_matches_the_1f1b_formula(tmp_path, p, m):
    b = TraceBuilder(p)
    _one_f_one_b(b, p, m, fwd=100 * US, bwd=200 * US, iterations=3)
    prediction = summarize(run(b, tmp_path))
    assert prediction.iteration_source == "ops" and prediction.steady_iterations == 2
    for rank in prediction.ranks:
        bubble = 1 - rank.compute_ns / rank.iteration_ns
        assert bubble == pytest.approx((p - 1) / (m + p - 1), abs=0.01)
    assert prediction.iteration_ns == pytest.approx((m + p - 1) * 300 * US, rel=0.01)


def test_breakdown_is_non_negative_and_adds_up(tmp_path):
    b = TraceBuilder(2, host_ns=3 * US)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        for it in range(4):
            k.iteration = it
            for _ in range(5):
                k.kernel(2 * US)
            k.kernel(30 * US if r else 10 * US)
            k.allreduce("dp", 20 * US, stream=1)
            k.host("cudaGetDevice", host_ns=40 * US)
            k.stream_sync(1)
    prediction = summarize(run(b, tmp_path))
    for r in prediction.ranks:
        parts = [r.compute_ns, r.exposed_comm_ns, r.peer_wait_ns, r.host_bound_ns, r.idle_ns]
        assert min(parts) >= 0
        assert sum(parts) == pytest.approx(r.iteration_ns)
    assert prediction.host_bound_ns > 0 and prediction.exposed_comm_ns > 0


def test_iterations_from_markers_exclude_the_first_and_a_partial_last(tmp_path):
    b = TraceBuilder(1)
    k = b.rank(0)
    k.iteration = 0
    k.kernel(500 * US)  # initialisation
    for it in range(4):
        k.iteration = it
        for _ in range(10):
            k.kernel(10 * US)
        k.stream_sync()
    k.iteration = 4
    k.kernel(1 * US)  # teardown
    sim = run(b, tmp_path)
    it = sim.iterations[0]
    assert it.source == "ops" and it.count == 5
    assert it.steady.tolist() == [1, 2, 3]
    assert summarize(sim).iteration_ns == 100 * US


def test_iterations_without_markers_from_repeated_sequences(tmp_path):
    """A benchmark loop (no optimizer, no ops): warm-up, then five identical steps ending in a sync."""
    b = TraceBuilder(1, host_ns=1 * US)
    k = b.rank(0)
    for _ in range(3):
        k.memcpy(1 << 20, "HtoD", 5 * US)
    for _ in range(5):
        k.gemm(4096, 4096, 4096, 200 * US)
        k.kernel(20 * US)
        k.kernel(30 * US)
        k.memcpy(4, "DtoH", 1 * US)
        k.host()
    k.host("cudaFree")
    sim = run(b, tmp_path)
    it = sim.iterations[0]
    assert it.source == "repetition"
    # the repeated unit starts after the warm-up; boundaries fall just after the step's host sync
    assert it.bounds.tolist() == [0, 7, 12, 17, 22, 27, 29]
    assert it.steady.tolist() == [1, 2, 3, 4]
    assert summarize(sim).iteration_ns == 253 * US  # two launches after the sync, then 251 us of work


def test_find_period():
    seq = np.array([9, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3, 7])
    assert find_period(seq) == (2, 3, 3)
    assert find_period(np.arange(10)) is None


def test_find_period_counts_only_units_with_eligible_values():
    host = [1, 2] * 6  # a host-only pair repeated most: torch 2.6 asks NVML for the device count before CUDA starts
    seq = np.array(host + [7, 8, 9, 7, 8, 9, 5])
    assert find_period(seq) == (0, 2, 6)
    eligible = np.array([False] * len(host) + [True] * 7)
    assert find_period(seq, eligible=eligible) == (12, 3, 2)
    assert find_period(np.array(host), eligible=np.zeros(len(host), dtype=bool)) is None


def test_a_repeated_host_query_is_no_iteration(tmp_path):
    """One training step (no loop, no ops): torch 2.6 counts devices through NVML six times before CUDA starts.
    Those repeated pairs were taken for six iterations of no device work (0.001 ms predicted)."""
    b = TraceBuilder(1, host_ns=1 * US)
    k = b.rank(0)
    for _ in range(6):
        k.host("nvmlInit")
        k.host("nvmlDeviceGetCount_v2")
    k.gemm(4096, 4096, 4096, 200 * US)
    k.kernel(20 * US)
    k.memcpy(4, "DtoH", 1 * US)
    sim = run(b, tmp_path)
    it = sim.iterations[0]
    assert it.source == "whole"
    assert summarize(sim).iteration_ns > 200 * US


def test_roofline_prices_gemms_by_flops_and_collectives_by_bytes(tmp_path):
    b = TraceBuilder(2)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.gemm(8192, 8192, 8192, 0)
        k.allreduce("dp", 0, nelems=1 << 28)
        k.allreduce("dp", 0, nelems=1 << 10)
    sim = simulate(load(b.write(tmp_path / "r")), H100, RooflineDurations())
    device = sim.devices[0]
    flops = 2 * 8192**3
    assert device[0] == pytest.approx(flops / (H100.peak_flops("bf16") * 0.7) * 1e9 + 2_000, rel=1e-3)
    assert device[1] > 100 * device[2] > 0


def test_memory_peak_headroom_and_oom(tmp_path):
    b = TraceBuilder(1)
    b.rank(0).kernel(1 * US)
    b.allocation(0, 10 << 30)
    b.allocation(0, 90 << 30)
    prediction = summarize(run(b, tmp_path))
    assert prediction.peak_memory_bytes == 90 << 30
    assert prediction.oom and "exceeds" in prediction.oom_reason
    assert prediction.headroom_bytes == H100.memory_bytes - (90 << 30)


@pytest.mark.slow
def test_measured_kineto_trace_replays_its_own_durations(tmp_path):
    """Two ranks imported from torch.profiler: auto picks the measured durations."""
    import json as js

    from maya_trace_spec.interop.kineto import import_kineto

    fixture = FIXTURES / "kineto_gpu_small.json"
    rank0 = js.loads(fixture.read_text())
    rank0["distributedInfo"]["rank"] = 0
    (tmp_path / "rank0.json").write_text(js.dumps(rank0))
    run_dir = import_kineto([tmp_path / "rank0.json", fixture], tmp_path / "run", hardware="h100-sxm")
    sim = simulate(load(run_dir), H100, "auto")
    assert isinstance(sim.provider, MeasuredDurations)
    prediction = summarize(sim)
    assert prediction.compute_ns == 55_125 + 2_500 + 1_500 + 3_250  # the four measured kernels, copies, memsets
    assert sim.result(0).launch_end.tolist() == sim.result(1).launch_end.tolist()


def test_timeline_has_a_process_per_rank_and_a_track_per_stream(tmp_path):
    import json as js

    from maya.simulator.timeline import write_timeline

    b = TraceBuilder(2, host_ns=1 * US)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.kernel(10 * US)
        k.record(1)
        k.wait(5, 1)
        k.allreduce("dp", 20 * US, stream=5)
        k.device_sync()
    sim = run(b, tmp_path)
    count = write_timeline(tmp_path / "t.json", sim.replicas, sim.results, sim.devices, sim.traces)
    events = js.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert len(events) == count
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert names == {(r, n) for r in (0, 1) for n in (f"rank {r}", "host", "stream 0", "stream 5")}
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == 0]
    assert {e["cat"] for e in slices} == {"host", "wait", "device", "collective"}
    coll = next(e for e in slices if e["cat"] == "collective")
    assert (coll["ts"], coll["dur"]) == (11.0, 20.0)


def test_predicting_stores_nothing_and_recording_is_atomic(tmp_path, maya_home, monkeypatch):
    import duckdb

    from maya.api import PredictOptions, predict, record
    from maya.simulator.report import Prediction

    b = TraceBuilder(1)
    b.rank(0).kernel(10 * US)
    run_dir = b.write(tmp_path / "run")
    prediction = predict(run_dir, PredictOptions(durations="measured"))
    assert not (maya_home / "warehouse.duckdb").exists()  # predicting has no side effect
    pid = record(prediction)
    monkeypatch.setattr(Prediction, "to_dict", lambda self, **kw: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        record(prediction)
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT prediction_id, run_id, durations, iteration_ms FROM predictions").fetchall()
    finally:
        con.close()
    assert rows == [(pid, prediction.run_id, "measured", 0.01)]


def test_find_period_prefers_the_shortest_period_covering_as_much():
    unit = [5, 6, 7, 5, 8]
    seq = np.array([1, 2] + unit * 6 + [3])
    assert find_period(seq) == (2, 5, 6)


def test_a_failed_allocation_the_script_survived_is_no_oom(tmp_path):
    """The caching allocator frees its cache and retries after a failed cudaMalloc: only an OutOfMemoryError
    that reached the script (status `oom`, or a failed run with the failed allocation) is out of memory."""

    def build(status):
        b = TraceBuilder(1)
        b.rank(0).kernel(1 * US)
        b.allocation(0, 30 << 30)
        b.allocation(0, 30 << 30, kind="oom")
        return summarize(simulate(load(b.write(tmp_path / status, status=status)), H100, MeasuredDurations()))

    survived = build("complete")
    assert not survived.oom and survived.oom_reason is None
    assert any("1 device allocation(s) failed (rank 0: 1)" in n and "retried" in n for n in survived.notes)
    for status in ("oom", "failed"):
        failed = build(status)
        assert failed.oom and failed.oom_reason.startswith(  # the recorded failure named (tests/simulator/test_oom.py)
            "rank 0 ran out of device memory outside any recorded op: it requested 30.00 GiB with 30.00 GiB in use"
        )


def test_allocator_peaks_are_kept_per_rank():
    """Each captured rank's allocated peak (the most over its devices), and the job's the most of them."""
    from types import SimpleNamespace

    from maya.simulator.report import allocator_peak, allocator_peaks

    attrs = {
        "allocator_peaks": {
            "1": {"0": {"allocated_bytes": 5, "reserved_bytes": 9}, "1": {"allocated_bytes": 7, "reserved_bytes": 9}},
            "0": {"0": {"allocated_bytes": 3, "reserved_bytes": 4}},
        }
    }
    traces = SimpleNamespace(attrs=attrs)
    assert allocator_peaks(traces) == {0: 3, 1: 7}
    assert allocator_peak(traces) == 7
    assert allocator_peaks(SimpleNamespace(attrs={})) == {} and allocator_peak(SimpleNamespace(attrs={})) is None


@pytest.mark.slow
def test_an_all_to_all_prices_each_rank_its_own_share_as_a_copy(tmp_path):
    """torch's `all_to_all_single` (Megatron's MoE all-to-all dispatcher) is one NCCL group of a send and a recv to
    every member, the rank itself included: that pair spans one GPU, laid out as a one-rank collective, not as a
    send/recv between two GPUs (which the NCCL model refused: 'local GPUs (1, 1) are not distinct GPUs'), and priced
    as the copy NCCL makes of it on the GPU (its bytes read and written at the memory bandwidth), not as free."""
    b = TraceBuilder(2)
    b.communicator("ep", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.kernel(10 * US)
        k.group_start()
        for peer in (0, 1):
            k.send("ep", peer, 0)  # 1 Mi bf16 elements: 2 MiB
            k.recv("ep", peer, 0)
        k.group_end()
        k.kernel(10 * US)
    copy_ns = 2 * (2 << 20) / (H100.memory_bandwidth * RooflineDurations().memory_efficiency) * 1e9
    traces = load(b.write(tmp_path / "r"))
    for durations in (RooflineDurations(), CollectiveDurations("dgx-h100")):
        sim = simulate(traces, H100, durations)
        index = next(i for i, rep in enumerate(sim.replicas) if rep.rank == 1)
        frame = sim.replicas[index].program.frame
        p2p = frame[frame["collective_name"].isin(["send", "recv"])]
        assert p2p["comm_size"].tolist() == [2, 2, 1, 1]  # to rank 0, then to itself
        assert p2p["comm_gpus"].tolist() == [(1, 0), (0, 1), (1,), (1,)]
        device = np.asarray(sim.devices[index])[p2p.index]
        assert device[2:] == pytest.approx([copy_ns, copy_ns], abs=1), durations.name  # 1.6 us on H100 (whole ns)
        assert (device[:2] > 5 * copy_ns).all(), (durations.name, device)  # over NVLink, with NCCL's latency
    nccl = CollectiveModel("dgx-h100")
    with pytest.raises(ValueError, match="not distinct"):
        nccl.time("sendrecv", 1 << 20, 2, 1, gpus=(1, 1))


def test_a_d2h_copy_replayed_in_a_cuda_graph_never_blocks_the_host(tmp_path):
    b = TraceBuilder(1, host_ns=1 * US)
    k = b.rank(0)
    k.kernel(100 * US)
    k._call("cudaMemcpyAsync", "device", bytes=8, memcpy_kind="DtoH", device_duration_ns=2 * US)
    k.host()
    sim = run(b, tmp_path)
    assert sim.result(0).wait.sum() == 0
    assert sim.result(0).issue[2] == 3 * US  # the host ran ahead of the 100 us kernel
