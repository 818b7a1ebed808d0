"""Equivalent ranks: which ranks of a job behave alike, so that one capture stands for many.

Ranks are grouped by what sets them apart, read from rank 0's point-to-point traffic (`layout_of`):
- **pipeline stages**, the one axis along which SPMD training scripts run different code: the members of the smallest
  process group that holds every peer of the sends and receives made *between* the model's passes (outside every
  module's forward and every backward), assumed evenly strided across the world, as Megatron-LM and DeviceMesh lay
  them out (Megatron's two-stage pipelines send one direction over the world group, whose peers are global ranks, and
  the other over the pipeline group);
- **exchange groups**, each group whose members send to each other *within* a pass (in a module's forward or in a
  backward): context parallelism's ring attention passes keys and values around its group, and an expert-parallel
  all-to-all sends each member its tokens as a send and a receive per member. Their members run the same code with
  other peers and, for a ring, other shapes (a causal ring's load-balanced steps give each member other halves of its
  chunks), so each position in such a group is a class of its own; they are not pipeline stages, and read as one they
  hid the real stages (TP 2 x PP 2 x CP 2: the world group, used by the pipeline, held both the ring's peer and the
  next stage's, so every rank was a stage).
A rank's class is its pipeline stage and its position in each exchange group; without point-to-point traffic all
ranks form one class. Every class is then checked by capturing one more of its members and comparing call
signatures; a member that differs from its representative (rank 0 logging, say; `convert.signature`) splits the
class.

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
`pipeline_stages.STAGE_OPTIONS`, or the stages' ranks also exchange within the model's passes) every stage is
captured and the run's attrs say why.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from maya.core.pipeline_stages import P2P, Pipeline

REBUILT_FROM = 6
"""Fewest pipeline stages whose interior stages are rebuilt: stages 0, 1, 2, `P - 2` and `P - 1` are captured, so
with 6 one stage (3) is rebuilt."""


@dataclass(frozen=True)
class Layout:
    """What sets a job's ranks apart (`layout_of`): its pipeline stages and its exchange groups."""

    pipeline: Pipeline | None
    exchanges: tuple[Pipeline, ...] = ()
    """Each exchange group as an axis: a rank's position in it is `Pipeline.stage`."""

    def key(self, rank: int) -> tuple[int, ...]:
        """`rank`'s class: its stage and its position in each exchange group."""
        axes = ((self.pipeline,) if self.pipeline else ()) + self.exchanges
        return tuple(axis.stage(rank) for axis in axes)


def stage_classes(world_size: int, layout: Layout) -> dict[int, list[int]]:
    """Representative rank -> ranks it stands for, in rank order: one class per `Layout.key`, represented by its
    lowest rank (stage `s` of a pipeline alone: rank `s * stride`)."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for rank in range(world_size):
        classes.setdefault(layout.key(rank), []).append(rank)
    return {members[0]: members for members in classes.values()}


def layout_of(api_calls: pa.Table, communicators: pa.Table, ops: pa.Table | None = None) -> Layout:
    """The pipeline stages and exchange groups read from one rank's point-to-point traffic (its `api_calls`,
    `communicators` and `ops`: a call whose op has a module path or is in the backward phase is within a pass;
    without ops, every call is taken to be between passes)."""
    p2p = api_calls.filter(pc.is_in(api_calls.column("collective_name"), pa.array(list(P2P))))
    members = {
        row["comm_id"]: row["ranks"] for row in communicators.to_pylist() if row["ranks"] and len(row["ranks"]) > 1
    }
    peers = p2p.column("peer_rank").to_pylist() if "peer_rank" in p2p.column_names else [None] * len(p2p)
    within = _within_passes(p2p, ops)
    used = list(zip(p2p.column("comm_id").to_pylist(), peers, within))
    pipeline = _pipeline(members, [(comm, peer) for comm, peer, inside in used if not inside])
    exchanges: list[Pipeline] = []
    for comm in dict.fromkeys(comm for comm, _, inside in used if inside and comm in members):  # first use first
        axis = _strided(sorted(members[comm]), "exchange")
        if axis not in exchanges:
            exchanges.append(axis)
    return Layout(pipeline, tuple(exchanges))


def _within_passes(p2p: pa.Table, ops: pa.Table | None) -> list[bool]:
    """Per call of `p2p`: whether it is made within a pass (its op in a module's forward, or in a backward)."""
    if ops is None or not len(ops) or "op_id" not in p2p.column_names:
        return [False] * len(p2p)
    inside = pc.or_(pc.is_valid(ops.column("module_path")), pc.equal(ops.column("phase"), "backward"))
    within = set(ops.filter(pc.fill_null(inside, False)).column("op_id").to_pylist())
    return [op in within for op in p2p.column("op_id").to_pylist()]


def _pipeline(members: dict[str, list[int]], used: list[tuple[str, int | None]]) -> Pipeline | None:
    """The smallest group among those `used` that holds every peer they reach (peers by communicator rank)."""
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
    return _strided(sorted(min(holding, key=len) if holding else max(groups, key=len)), "pipeline")


def _strided(ranks: list[int], kind: str) -> Pipeline:
    """The axis of a group of sorted global `ranks`, which must be evenly strided."""
    stride = ranks[1] - ranks[0]
    if any(b - a != stride for a, b in zip(ranks, ranks[1:])) or stride <= 0:
        raise ValueError(f"{kind} group {ranks} is not evenly strided: emulate every rank (--no-dedup)")
    return Pipeline(len(ranks), stride)
