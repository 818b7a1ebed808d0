"""Equivalent ranks: which ranks of a job behave alike, so that one capture stands for many.

Ranks are grouped by pipeline stage, the one axis along which SPMD training scripts run different
code: the stages are read from rank 0's point-to-point traffic (the members of the smallest process group
its sends and receives use that holds every peer they reach, assumed evenly strided across the world, as
Megatron-LM and DeviceMesh lay them out: Megatron's two-stage pipelines send one direction over the world
group, whose peers are global ranks, and the other over the pipeline group). Without point-to-point
traffic all ranks form one class. Every class is then checked by
capturing one more of its members and comparing call signatures; a member that differs from its
representative (rank 0 logging, say; `convert.signature`) splits the class.

Every stage is its own class. In 1F1B schedules (Megatron-LM's, with or without interleaving, and PiPPy's)
stage `s` of `P` runs `P - s - 1` warm-up micro-batches (Megatron's interleaved schedule `2 (P - s - 1)` plus a
constant) before its first backward, so no two stages issue the same calls in the same order, and replaying one
interior stage's program for the others is not an equivalent (on a synthetic 1F1B job, `trace_builder.gpt_3d`, it
doubles a 4-stage step and deadlocks from 5 stages on). Megatron-LM's 1F1B interior stages are instead rebuilt
from one of them (`core/pipeline_stages.py`, `launcher._deduplicated`): with `REBUILT_FROM` stages or more, stages
0, 1, 2, `P - 2` and `P - 1` are captured first, stages 2 and `P - 2` are rebuilt from stage 1's capture and
compared with their own, and when they agree and every interior stage's exchanges are among stage 1's, stages 3 to
`P - 3` are rebuilt from stage 1's capture when the run is read (`simulator/trace.py`) instead of run (under the
interleaved schedule odd stages from stage 1's and even ones from stage 2's, stage `P - 3` captured too and checked
with `P - 2`, stages 3 to `P - 4` rebuilt);
otherwise (or when the command line sets an option that can give the stages different layers,
`pipeline_stages.STAGE_OPTIONS`) every stage is captured and the run's attrs say why.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from maya.core.pipeline_stages import Pipeline

REBUILT_FROM = 6
"""Fewest pipeline stages whose interior stages are rebuilt: stages 0, 1, 2, `P - 2` and `P - 1` are captured, so
with 6 one stage (3) is rebuilt."""


def stage_classes(world_size: int, pipeline: Pipeline | None) -> dict[int, list[int]]:
    """Representative rank -> ranks it stands for: one class per stage of `pipeline` (`pipeline_of`; None: one
    class)."""
    if pipeline is None:
        return {0: list(range(world_size))}
    classes: dict[int, list[int]] = {stage * pipeline.stride: [] for stage in range(pipeline.stages)}
    for rank in range(world_size):
        classes[pipeline.stage(rank) * pipeline.stride].append(rank)
    return classes


def pipeline_of(api_calls: pa.Table, communicators: pa.Table) -> Pipeline | None:
    """The pipeline stages read from rank 0's point-to-point traffic (tables of rank 0); None without any."""
    p2p = api_calls.filter(pc.is_in(api_calls.column("collective_name"), pa.array(["send", "recv"])))
    members = {
        row["comm_id"]: row["ranks"] for row in communicators.to_pylist() if row["ranks"] and len(row["ranks"]) > 1
    }
    peer_ranks = p2p.column("peer_rank").to_pylist() if "peer_rank" in p2p.column_names else [None] * len(p2p)
    used = list(zip(p2p.column("comm_id").to_pylist(), peer_ranks))
    used_comms = {comm for comm, _ in used}
    groups = [ranks for comm, ranks in members.items() if comm in used_comms]  # table order: ties are stable
    if not groups:
        return None
    peers = {
        members[comm][int(peer)]
        for comm, peer in used
        if comm in members and peer is not None and 0 <= peer < len(members[comm])
    }
    holding = [group for group in groups if peers <= set(group)]
    stages = sorted(min(holding, key=len) if holding else max(groups, key=len))
    stride = stages[1] - stages[0]
    if any(b - a != stride for a, b in zip(stages, stages[1:])) or stride <= 0:
        raise ValueError(f"pipeline group {stages} is not evenly strided: emulate every rank (--no-dedup)")
    return Pipeline(len(stages), stride)
