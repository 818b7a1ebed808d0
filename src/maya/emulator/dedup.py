"""Equivalent ranks: which ranks of a job behave alike, so that one capture stands for many.

Ranks are grouped by pipeline stage, the one axis along which SPMD training scripts run different
code: the stages are read from rank 0's point-to-point traffic (the members of the process group its
sends and receives use, assumed evenly strided across the world, as Megatron-LM and DeviceMesh lay
them out). Without point-to-point traffic all ranks form one class. Every class is then checked by
capturing one more of its members and comparing call signatures; a member that differs from its
representative (rank 0 logging, say; `convert.signature`) splits the class.

Every stage is its own class, interior stages too: in 1F1B schedules (Megatron-LM's, with or without
interleaving, and PiPPy's) stage `s` of `P` runs `P - s - 1` warm-up micro-batches (Megatron's interleaved
schedule `2 (P - s - 1)` plus a constant) before its first backward, so no two stages issue the same calls in
the same order. Replaying one interior stage's program for the others is not a cheaper equivalent: on a
synthetic 1F1B job (`trace_builder.gpt_3d`) it doubles a 4-stage step and deadlocks from 5 stages on.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def stage_classes(world_size: int, api_calls: pa.Table, communicators: pa.Table) -> dict[int, list[int]]:
    """Representative rank -> ranks it stands for, from rank 0's trace (tables of rank 0)."""
    p2p = api_calls.filter(pc.is_in(api_calls.column("collective_name"), pa.array(["send", "recv"])))
    comm_ids = set(p2p.column("comm_id").drop_null().to_pylist())
    groups = [
        row["ranks"]
        for row in communicators.to_pylist()
        if row["comm_id"] in comm_ids and row["ranks"] and len(row["ranks"]) > 1
    ]
    if not groups:
        return {0: list(range(world_size))}
    stages = sorted(max(groups, key=len))
    stride = stages[1] - stages[0]
    if any(b - a != stride for a, b in zip(stages, stages[1:])) or stride <= 0:
        raise ValueError(f"pipeline group {stages} is not evenly strided: emulate every rank (--no-dedup)")
    classes: dict[int, list[int]] = {rep: [] for rep in stages}
    for rank in range(world_size):
        classes[stages[(rank // stride) % len(stages)]].append(rank)
    return classes
