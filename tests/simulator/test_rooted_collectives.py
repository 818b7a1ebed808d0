"""A scatter's sends (`core.pipeline_stages.ROOTED`), matched as one collective of their communicator
(`simulator/program.py`): a rank replayed from the root's program meets the root there instead of deadlocking; the
collectives after sends and receives line up on every member."""

from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from maya.core import hardware
from maya.simulator import MeasuredDurations, simulate, summarize
from maya.simulator.program import _counts_p2p
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder


def _job(tmp_path: Path, world: int, op_name: str, reps: dict[int, list[int]] | None = None) -> Path:
    """Rank 0 scatters from itself at initialisation (a send to each peer in one group, as NCCL's process group runs
    DTensor's `distribute_tensor`; each other captured rank receives from it), then every captured rank trains two
    steps of a GEMM and an all-reduce; the scatter's op is named `op_name`. `reps`: the captured ranks and the ranks
    each stands for (rank 0 for every rank when None)."""
    job = TraceBuilder(world)
    job.communicator("world", list(range(world)))
    reps = reps if reps is not None else {0: list(range(world))}
    for rank, represents in reps.items():
        r = job.rank(rank, represents=represents)
        r.iteration, r.module = 0, "init"
        r.group_start()
        if rank == 0:
            for peer in range(1, world):
                r.send("world", peer, 20_000)
        else:
            r.recv("world", 0, 20_000)
        r.group_end()
        r.module = None
        for step in (1, 2):
            r.iteration = step
            r.gemm(4096, 4096, 4096, 500_000)
            r.allreduce("world", 100_000)
    run = job.write(tmp_path / op_name)
    for rank in reps:  # the builder names scopes `nn.Module: ...`
        for part in (run / "ops" / f"rank={rank}").glob("*.parquet"):
            table = pq.read_table(part)
            names = pc.replace_substring(table.column("name"), "nn.Module: init", op_name)
            pq.write_table(table.set_column(table.schema.get_field_index("name"), "name", names), part)
    return run


@pytest.mark.parametrize("world", [2, 4])
def test_a_replayed_rank_meets_the_roots_scatter(tmp_path, world):
    sim = simulate(load(_job(tmp_path, world, "scatter")), hardware.get("h100-sxm"), MeasuredDurations())
    assert len(sim.replicas) == world
    assert summarize(sim).iteration_ns > 0


def test_plain_sends_replayed_from_one_rank_still_deadlock(tmp_path):
    """Sends no scatter made stay point-to-point: every copy of the root sends, and none receives."""
    with pytest.raises(Exception, match="deadlock"):
        simulate(load(_job(tmp_path, 2, "send")), hardware.get("h100-sxm"), MeasuredDurations())


@pytest.mark.parametrize(
    ("world", "reps"),
    [(2, {0: [0], 1: [1]}), (3, {0: [0], 1: [1, 2]}), (4, {0: [0, 1, 2], 3: [3]}), (4, {0: [0], 1: [1, 2, 3]})],
)
def test_the_root_and_a_receiver_both_captured_meet_at_later_collectives(tmp_path, world, reps):
    """The NCCL stub's `comm_seq` counts every send and receive on the communicator: after the scatter the root's has
    moved N - 1 and each receiver's 1. Collectives are numbered without them, so the all-reduces that follow line up
    (with 3 or more ranks, a job whose root and a receiver were both captured deadlocked)."""
    sim = simulate(load(_job(tmp_path, world, "scatter", reps)), hardware.get("h100-sxm"), MeasuredDurations())
    assert len(sim.replicas) == world
    assert summarize(sim).iteration_ns > 0


def test_sends_between_some_members_do_not_shift_later_collectives(tmp_path):
    """A plain send from rank 0 to rank 1 on the communicator of three ranks, then an all-reduce of all three: rank
    2's `comm_seq` for it is one less than the others', and it still meets theirs."""
    job = TraceBuilder(3)
    job.communicator("world", [0, 1, 2])
    for rank in range(3):
        r = job.rank(rank)
        r.iteration = 0
        if rank == 0:
            r.send("world", 1, 20_000)
        elif rank == 1:
            r.recv("world", 0, 20_000)
        for step in (1, 2):
            r.iteration = step
            r.gemm(4096, 4096, 4096, 500_000)
            r.allreduce("world", 100_000)
    sim = simulate(load(job.write(tmp_path / "run")), hardware.get("h100-sxm"), MeasuredDurations())
    assert len(sim.replicas) == 3
    assert summarize(sim).iteration_ns > 0


def test_a_numbering_of_its_own_for_p2p_is_kept():
    """Where `comm_seq` numbers sends and receives apart from collectives (torch's process group, as its profiler
    records it: numbers repeat), a collective's `comm_seq` is already the count of collectives: kept as it is."""
    comms = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    seqs = np.array([0, 1, 2, 3, 0, 0, 1, 1], dtype="float64")  # b: collective 0, p2p 0, collective 1, p2p 1
    p2p = np.array([False, True, False, True, False, True, False, True])
    assert _counts_p2p(comms, seqs, p2p, np.arange(8)) == {"a"}
    assert _counts_p2p(comms, seqs, np.zeros(8, dtype=bool), np.arange(8)) == set()  # no p2p: nothing to take off
