"""A scatter's sends (`core.pipeline_stages.ROOTED`), matched as one collective of their communicator
(`simulator/program.py`): a rank replayed from the root's program meets the root there instead of deadlocking."""

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from maya.core import hardware
from maya.simulator import MeasuredDurations, simulate, summarize
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder


def _job(tmp_path: Path, world: int, op_name: str) -> Path:
    """Rank 0, standing for every rank, scatters from rank 0 at initialisation (a send to each peer in one group,
    as NCCL's process group runs DTensor's `distribute_tensor`), then trains two steps of a GEMM and an
    all-reduce; the scatter's op is named `op_name`."""
    job = TraceBuilder(world)
    job.communicator("world", list(range(world)))
    r = job.rank(0, represents=list(range(world)))
    r.iteration, r.module = 0, "init"
    r.group_start()
    for peer in range(1, world):
        r.send("world", peer, 20_000)
    r.group_end()
    r.module = None
    for step in (1, 2):
        r.iteration = step
        r.gemm(4096, 4096, 4096, 500_000)
        r.allreduce("world", 100_000)
    run = job.write(tmp_path / op_name)
    for part in (run / "ops" / "rank=0").glob("*.parquet"):  # the builder names scopes `nn.Module: ...`
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
