"""Deduplicated ranks expanded to their groups (`simulator/topology.py`) with Megatron-LM's layout."""

import pytest

from maya.core import hardware
from maya.simulator import MeasuredDurations, simulate, summarize
from maya.simulator.topology import _map_group
from maya.simulator.trace import load
from maya.simulator.trace_builder import gpt_3d

# Megatron-Core orders ranks tp-cp-ep-dp-pp (tensor parallel fastest): with TP=2, PP=2, DP=2 on 8 ranks,
# rank = tp + 2 * dp + 4 * pp. Worked out by hand from that formula:
#   rank: 0 1 2 3 4 5 6 7
#   tp:   0 1 0 1 0 1 0 1
#   dp:   0 0 1 1 0 0 1 1
#   pp:   0 0 0 0 1 1 1 1
# A group holds the ranks that differ only in its axes.
MEGATRON_GROUPS = {
    "tensor": [[0, 1], [2, 3], [4, 5], [6, 7]],
    "data": [[0, 2], [1, 3], [4, 6], [5, 7]],
    "pipeline": [[0, 4], [1, 5], [2, 6], [3, 7]],
    "model (tensor x pipeline)": [[0, 1, 4, 5], [2, 3, 6, 7]],
    "tensor x data": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "world": [[0, 1, 2, 3, 4, 5, 6, 7]],
}
# Deduplicated by pipeline stage (`emulator/dedup.stage_classes`): rank 0 stands for stage 0, rank 4 for
# stage 1, each list in rank order; `maya emulate --ranks 0,4` gives the same lists (`emulator/subset.py`).
LISTS = {0: [0, 1, 2, 3], 4: [4, 5, 6, 7]}
POSITION = {x: (y, i) for y, listed in LISTS.items() for i, x in enumerate(listed)}


def group_of(kind: str, rank: int) -> list[int]:
    return next(g for g in MEGATRON_GROUPS[kind] if rank in g)


@pytest.mark.parametrize("kind", MEGATRON_GROUPS)
@pytest.mark.parametrize("rank", range(8))
def test_megatron_groups_expand_to_the_ranks_megatron_builds(kind, rank):
    """Each rank, replayed from its stage's representative, is in the group Megatron gives it, which holds
    the same ranks for every member (rank 1's model group was [1, 0, 5, 6], rank 0's [0, 1, 4, 5])."""
    y, j = POSITION[rank]
    mapped = _map_group(group_of(kind, y), y, j, POSITION, LISTS)
    assert sorted(mapped) == group_of(kind, rank)
    assert mapped[group_of(kind, y).index(y)] == rank  # the representative's role is the copy's


@pytest.mark.parametrize("rank", range(8))
def test_pipeline_peer_is_the_same_model_shard_on_the_other_stage(rank):
    """A send to communicator rank 1 (or 0) of the pipeline group goes to the rank with the same tensor-
    and data-parallel index on the other stage."""
    y, j = POSITION[rank]
    mapped = _map_group(group_of("pipeline", y), y, j, POSITION, LISTS)
    assert mapped == [rank % 4, rank % 4 + 4]


@pytest.mark.slow
def test_a_pipeline_captured_once_per_stage_predicts_what_every_rank_does(tmp_path):
    """TP 2 x PP 4 x DP 2 in Megatron's layout, 1F1B: one capture per stage standing for its 4 ranks replays
    to the step of all 16 captured (each stage's own warm-up, its peers mapped through the groups)."""
    steps = {}
    for dedup in (True, False):
        job = gpt_3d(2, 4, 2, layers=4, microbatches=4, iterations=2, hidden=1024, seq=512, dedup=dedup)
        sim = simulate(load(job.write(tmp_path / str(dedup))), hardware.get("h100-sxm"), MeasuredDurations())
        steps[dedup] = summarize(sim).iteration_ns
        assert len(sim.replicas) == 16 and len(sim.programs) == (4 if dedup else 16)
    assert steps[True] == pytest.approx(steps[False], rel=1e-3)
