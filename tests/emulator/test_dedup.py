"""Pipeline stages read from rank 0's point-to-point traffic (`emulator/dedup.stage_classes`); exchange groups in
`test_dedup_exchanges.py`."""

import json
import os
import subprocess
import sys

import pytest

from maya.emulator import dedup

SCRIPT = """
import importlib.util, json, sys, pyarrow as pa
spec = importlib.util.spec_from_file_location("dedup", sys.argv[1])  # the module alone: a quick interpreter
dedup = sys.modules["dedup"] = importlib.util.module_from_spec(spec)  # registered: its dataclass looks itself up
spec.loader.exec_module(dedup)
stage_classes = dedup.stage_classes
calls = pa.table({"collective_name": ["send", "recv"], "comm_id": ["b", "a"], "peer_rank": [1, 2]})
comms = pa.table({"comm_id": ["b", "a"], "ranks": [[0, 2, 4, 6], [0, 1, 2, 3]]})
print(json.dumps(stage_classes(8, dedup.layout_of(calls, comms))))
"""


@pytest.mark.slow
def test_groups_of_one_size_that_both_hold_the_peers_tie_in_table_order():
    """Rank 0 reaches rank 2 over two four-rank groups: the first in the communicators table is the pipeline
    group, whatever the process's string hash seed (a set of comm ids decided before)."""
    answers = set()
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, dedup.__file__], env=env, capture_output=True, text=True, check=True
        )
        answers.add(out.stdout.strip())
    assert [json.loads(a) for a in answers] == [{"0": [0, 1], "2": [2, 3], "4": [4, 5], "6": [6, 7]}]


def test_a_scatters_sends_are_no_pipeline():
    """DTensor's `distribute_tensor` scatters each parameter from rank 0, which NCCL's process group runs as a send
    to every member (OLMo-core's model initialisation): one class, where they read as a stage per rank."""
    import pyarrow as pa

    calls = pa.table(
        {
            "collective_name": ["send", "send", "send", "allreduce"],
            "comm_id": ["w", "w", "w", "w"],
            "peer_rank": [1, 2, 3, None],
            "op_id": [1, 1, 1, 2],
        }
    )
    comms = pa.table({"comm_id": ["w"], "ranks": [[0, 1, 2, 3]]})

    def ops(name: str) -> pa.Table:
        return pa.table(
            {"op_id": [0, 1, 2], "module_path": [None, None, None], "phase": ["forward"] * 3, "name": ["x", name, "y"]}
        )

    assert dedup.stage_classes(4, dedup.layout_of(calls, comms, ops("scatter"))) == {0: [0, 1, 2, 3]}
    assert len(dedup.stage_classes(4, dedup.layout_of(calls, comms, ops("send")))) == 4  # a pipeline's sends


def test_a_pipeline_sent_over_the_world_group_is_its_own_smaller_group():
    """picotron (DP 2 x PP 2 x TP 2) sends between stages over the world group to global ranks, and all-reduces over
    its pipeline group [0, 2]: the stages are that group's (2 classes of 4), not a stage per rank of the world's."""
    import pyarrow as pa

    calls = pa.table(
        {
            "collective_name": ["send", "recv", "allreduce", "allreduce"],
            "comm_id": ["world", "world", "pp", "tp"],
            "peer_rank": [2, 2, None, None],
        }
    )
    groups = {"world": list(range(8)), "tp": [0, 1], "pp": [0, 2], "dp": [0, 4]}  # rank 0's, as its capture has them
    comms = pa.table({"comm_id": list(groups), "ranks": list(groups.values())})
    assert dedup.stage_classes(8, dedup.layout_of(calls, comms)) == {0: [0, 1, 4, 5], 2: [2, 3, 6, 7]}


def test_of_groups_holding_the_peers_inside_the_sends_group_the_largest_is_the_pipeline():
    """Four stages sent over the world group, rank 0 sending to and receiving from stage 1 alone: a group tied
    between the first two stages ([0, 1]) holds that peer as the pipeline group ([0, 1, 2, 3]) does. The larger is
    taken (four stages: nothing merged); without a peer known, the sends' own group stays the pipeline."""
    import pyarrow as pa

    groups = {"world": list(range(8)), "tied": [0, 1], "pp": [0, 1, 2, 3]}
    comms = pa.table({"comm_id": list(groups), "ranks": list(groups.values())})
    calls = pa.table(
        {
            "collective_name": ["send", "recv", "allreduce", "allreduce"],
            "comm_id": ["world", "world", "tied", "pp"],
            "peer_rank": [1, 1, None, None],
        }
    )
    assert len(dedup.stage_classes(8, dedup.layout_of(calls, comms))) == 4
    unknown = calls.set_column(2, "peer_rank", pa.array([None] * 4, pa.int64()))
    assert len(dedup.stage_classes(8, dedup.layout_of(unknown, comms))) == 8  # the world: a stage per rank
