"""Folding ranks that replay alike (`simulator/fold.py`): the engine replays one rank per class and gives every
rank exactly the times a replay of every rank gives."""

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import maya.simulator.simulation as simulation
from maya.core import hardware
from maya.simulator import MeasuredDurations, RooflineDurations, simulate
from maya.simulator.engine import Deadlock, Engine, RankResult
from maya.simulator.fold import fold
from maya.simulator.predict import predict
from maya.simulator.topology import GlobalComm, Replica
from maya.simulator.trace import TraceSet, capture_statuses, load
from maya.simulator.trace_builder import TraceBuilder, gpt_3d

H100 = hardware.get("h100-sxm")
US = 1_000


def _replays(sim) -> tuple[Engine, list[RankResult], list[RankResult]]:
    shortest = sim.provider.collective_includes_wait
    folded = Engine(sim.replicas, sim.devices, sim.comms, shortest_collective=shortest)
    whole = Engine(sim.replicas, sim.devices, sim.comms, shortest_collective=shortest, folded=False)
    return folded, folded.run(), whole.run()


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "per_node"),
    [
        pytest.param(2, 4, 2, 8, marks=pytest.mark.slow),
        pytest.param(2, 2, 4, 4, marks=pytest.mark.slow),
        pytest.param(1, 2, 8, 8, marks=pytest.mark.slow),
        (4, 1, 4, 8),
    ],
)
def test_a_folded_replay_gives_every_rank_the_times_of_the_whole_replay(tmp_path, tp, pp, dp, per_node):
    """Tensor, pipeline (p2p) and data parallel groups of a deduplicated job, within and across nodes."""
    job = gpt_3d(tp, pp, dp, layers=2, microbatches=4, iterations=2, hidden=1024, seq=512, gpus_per_node=per_node)
    sim = simulate(load(job.write(tmp_path / "run")), H100, RooflineDurations(), contention=False)
    engine, folded, whole = _replays(sim)
    assert len(engine.ranks) < len(sim.replicas)  # it folded
    assert [r.rank for r in folded] == [r.rank for r in whole] == [r.rank for r in sim.replicas]
    for a, b in zip(folded, whole):
        for f in fields(RankResult):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f"rank {a.rank} {f.name}")


def test_collectives_between_classes_wait_for_the_slower_class(tmp_path):
    """Ranks 0 and 1 (each standing for itself and the rank two above) run different kernels and meet in
    tensor-parallel all-reduces: the faster class waits for the slower one, as every rank does in the whole
    replay."""
    b = TraceBuilder(4)
    for r in (0, 1):
        tp, dp = [0, 1], [0, 2] if r == 0 else [1, 3]
        b.communicator("tp0", tp)
        b.communicator(f"dp{r}", dp)
        k = b.rank(r, represents=[r, r + 2])
        for it in range(3):
            k.iteration = it
            k.kernel((70 if r else 20) * US)
            k.allreduce("tp0", 5 * US)
            k.kernel(10 * US)
            k.allreduce(f"dp{r}", 40 * US, stream=1)
            k.stream_sync(1)
    sim = simulate(load(b.write(tmp_path / "run")), H100, MeasuredDurations())
    engine, folded, whole = _replays(sim)
    assert len(engine.ranks) == 2
    for a, c in zip(folded, whole):
        np.testing.assert_array_equal(a.end, c.end)
        np.testing.assert_array_equal(a.launch_ready, c.launch_ready)
    assert folded[0].launch_ready[0] == 70 * US  # rank 0's first all-reduce waited for rank 1's 70 us kernel


def _skipping_peer(world: int = 4) -> TraceBuilder:
    """Ranks 0 and 1 (standing for 2 and 3) of 4: rank 1 skips its last tensor-parallel all-reduce."""
    b = TraceBuilder(world)
    for r in (0, 1):
        b.communicator("tp0", [0, 1])
        b.communicator(f"dp{r}", [0, 2] if r == 0 else [1, 3])
        k = b.rank(r, represents=[r, r + 2])
        for it in range(3):
            k.iteration = it
            k.kernel((70 if r else 20) * US)
            if not (r == 1 and it == 2):
                k.allreduce("tp0", 5 * US)
            k.kernel(10 * US)
            k.allreduce(f"dp{r}", 40 * US, stream=1)
            k.stream_sync(1)
    return b


def test_a_folded_replay_that_deadlocks_is_reported_by_the_whole_replay(tmp_path):
    """Rank 1 (standing for ranks 1 and 3) skips its last tensor-parallel all-reduce: the folded replay's quotient
    keys cannot name the stuck ranks, so the unfolded replay reruns and names them and the absent peers, which ended
    their complete captures without it: the captures differ (not the timing), and the message says so and what to
    capture instead."""
    with pytest.raises(
        Deadlock,
        match=r"simulation deadlocked: rank\(s\) 0, .*collective #\d+ on tp0: ranks \[0\] arrived, \[1\] never did.*; "
        r"rank\(s\) \[1, 3\] ended without it, their captures complete: the ranks' captures made different.*"
        r"capture one rank: maya emulate --ranks 0$",
    ):
        simulate(load(_skipping_peer().write(tmp_path / "run")), H100, MeasuredDurations())


@pytest.mark.parametrize(
    "status, attrs, named",
    [
        ("failed", {"rank_status": {"0": "complete", "1": "failed"}}, "rank 1: failed, rank 3: failed"),
        ("oom", None, "rank 1: oom, rank 3: oom"),  # a run of before `rank_status`: the run's status
        (
            "interrupted",
            {"interrupted_by": "SIGTERM", "interrupted_ranks": [1]},
            "rank 1: interrupted, rank 3: interrupted",
        ),
    ],
)
def test_a_deadlock_on_a_peer_whose_capture_stopped_early_names_its_status(tmp_path, status, attrs, named):
    """The absent peer's capture did not complete: its calls stop where its script did, so the collective is
    missing for that reason, not because the ranks decided differently; no advice to capture one rank."""
    with pytest.raises(Deadlock) as e:
        simulate(load(_skipping_peer().write(tmp_path / "run", status=status, attrs=attrs)), H100, MeasuredDurations())
    message = str(e.value)
    assert f"ended without it: their captures did not complete ({named}; the run's logs" in message, message
    assert "made different" not in message and "--ranks 0" not in message


def test_a_deadlock_after_an_interrupted_run_is_cut_says_the_captures_differ(tmp_path):
    """Both ranks stopped by a signal in iteration 4, rank 1 skipped iteration 1's all-reduce: predict cuts both to
    iterations 0-3, which both completed, so the stop is not why the collective is missing: the captures differ."""
    b = TraceBuilder(world_size=2)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        for it in range(5):
            k.iteration = it
            k.kernel(1_000_000)
            if it < 4 and not (r == 1 and it == 1):
                k.allreduce("dp", 0, nelems=1)
                k.stream_sync()
    statuses = {"0": "interrupted", "1": "interrupted"}
    attrs = {"interrupted_by": "SIGTERM", "interrupted_ranks": [0, 1], "rank_status": statuses}
    with pytest.raises(Deadlock) as e:
        predict(b.write(tmp_path / "run", status="interrupted", attrs=attrs), durations="measured")
    message = str(e.value)
    assert "rank(s) [1] ended without it, their captures complete: the ranks' captures made different" in message
    assert message.endswith("capture one rank: maya emulate --ranks 0"), message


def test_a_deadlock_on_a_peer_of_unknown_status_claims_neither_cause(tmp_path, monkeypatch):
    """Without the peers' capture statuses the message names both causes (a capture stopped early, or captures that
    differ) and claims neither."""
    monkeypatch.setattr(simulation, "capture_statuses", lambda traces: {})
    with pytest.raises(Deadlock) as e:
        simulate(load(_skipping_peer().write(tmp_path / "run")), H100, MeasuredDurations())
    message = str(e.value)
    assert "rank(s) [1, 3] ended without it: their captures stopped early (logs/rank<N>.txt) or made different" in (
        message
    )
    assert "unknown" not in message and "complete" not in message


def test_a_rebuilt_stage_takes_its_source_ranks_capture_status():
    """Stage 3 rebuilt from rank 1 is not in the run's `rank_status`: it has rank 1's status, not the run's."""
    attrs = {"rank_status": {"0": "complete", "1": "oom", "2": "complete"}}

    def rank(device: dict, represents: list[int]) -> SimpleNamespace:
        return SimpleNamespace(device=device, represents=represents)

    ranks = {0: rank({}, [0]), 1: rank({}, [1]), 2: rank({}, [2]), 3: rank({"rebuilt_from": 1}, [3])}
    traces = TraceSet("r", Path("r"), {"status": "complete", "attrs": json.dumps(attrs)}, ranks)
    assert capture_statuses(traces) == {0: "complete", 1: "oom", 2: "complete", 3: "oom"}


def test_ranks_whose_peers_differ_are_not_folded_together():
    """Six ranks of one program and device times but for C's: A0 and A2 meet a B, A1 meets C, so A1 is apart
    from A0 and A2 although all three replay the same program with the same times."""
    a, b, c = (SimpleNamespace(launches=[]) for _ in range(3))  # programs: their identity (and no p2p) matter
    d_ab, d_c = np.zeros(1), np.zeros(1)
    comms = [GlobalComm("g0", (0, 3), 1), GlobalComm("g1", (1, 5), 1), GlobalComm("g2", (2, 4), 1)]

    def replica(rank: int, program: object, g: int) -> Replica:
        return Replica(rank, program, True, [g], [[((g, 0), 2)]])

    replicas = [replica(0, a, 0), replica(1, a, 1), replica(2, a, 2), replica(3, b, 0), replica(4, b, 2)]
    replicas.append(replica(5, c, 1))
    found = fold(replicas, [d_ab] * 5 + [d_c], comms)
    assert found is not None
    classes = found.classes
    assert classes[0] == classes[2] != classes[1] and classes[3] == classes[4] and len(set(classes)) == 4
    # one quotient key per collective that meets: A0/A2 with B, A1 with C
    keys = {classes[i]: found.keys[k][0][0] for k, i in enumerate(found.representatives)}
    assert keys[classes[0]] == keys[classes[3]] != keys[classes[1]] == keys[classes[5]]
    assert keys[classes[0]][1] == 2


def test_p2p_peers_fold_by_where_each_end_meets_them_not_by_their_order():
    """i meets an A rank in its first launch and a B rank in its second, i' the other way round (A and B run for
    other times): the same peers, met at other positions of their program, so they replay differently; a third
    rank meeting them as i does folds with i, whatever order its peers come in."""
    op = SimpleNamespace(p2p=True)
    both, a, b = (
        SimpleNamespace(launches=[[op], [op]]),
        SimpleNamespace(launches=[[op]]),
        SimpleNamespace(launches=[[op]]),
    )
    end, times_a, times_b = np.zeros(2), np.ones(1), np.full(1, 5.0)

    def key(src, dst):
        return ((0, src, dst, 0), 2)

    replicas = [
        Replica(0, a, True, [], [[key(0, 2)]]),
        Replica(1, b, True, [], [[key(1, 2)]]),
        Replica(2, both, True, [], [[key(0, 2)], [key(1, 2)]]),
        Replica(3, a, True, [], [[key(3, 5)]]),
        Replica(4, b, True, [], [[key(4, 5)]]),
        Replica(5, both, True, [], [[key(4, 5)], [key(3, 5)]]),
        Replica(6, b, True, [], [[key(6, 8)]]),  # its B listed before its A
        Replica(7, a, True, [], [[key(7, 8)]]),
        Replica(8, both, True, [], [[key(7, 8)], [key(6, 8)]]),  # as i
    ]
    folding = fold(replicas, [times_a, times_b, end] * 2 + [times_b, times_a, end], [])
    assert folding is not None and folding.classes[2] == folding.classes[8] != folding.classes[5]


@pytest.mark.slow
def test_nothing_folds_when_every_rank_was_captured(tmp_path):
    job = gpt_3d(2, 2, 2, layers=1, microbatches=2, iterations=2, hidden=512, seq=256, dedup=False)
    sim = simulate(load(job.write(tmp_path / "run")), H100, MeasuredDurations(), contention=False)
    assert fold(sim.replicas, sim.devices, sim.comms) is None


@pytest.mark.slow
def test_a_prediction_is_the_same_whether_its_ranks_are_folded_or_not(tmp_path, monkeypatch):
    """The whole prediction (contention's second replay, per-rank reports, breakdown) of a deduplicated 32-rank job
    over 4 nodes, with and without folding."""
    from maya.simulator import engine
    from maya.simulator.predict import predict

    run = gpt_3d(2, 2, 8, layers=2, microbatches=4, iterations=3, hidden=1024, seq=512).write(tmp_path / "run")
    folded = predict(run, hardware="h100-sxm", durations="roofline").to_dict()
    monkeypatch.setattr(engine, "fold", lambda *args: None)
    whole = predict(run, hardware="h100-sxm", durations="roofline").to_dict()
    for figures in (folded, whole):
        figures.pop("simulation_s")  # the replays' own wall time
    assert folded["simulated_ranks"] == 32 and folded == whole
