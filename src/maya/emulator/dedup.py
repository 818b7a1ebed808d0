"""Equivalent ranks: which ranks of a job behave alike, so that one capture stands for many.

Ranks are grouped by what sets them apart, read from rank 0's point-to-point traffic (`layout_of`):
- **pipeline stages**, the one axis along which SPMD training scripts run different code: the members of the smallest
  process group that holds every peer of the sends and receives made *between* the model's passes (outside every
  module's forward and every backward), assumed evenly strided across the world, as Megatron-LM and DeviceMesh lay
  them out (Megatron's two-stage pipelines send one direction over the world group, whose peers are global ranks, and
  the other over the pipeline group; picotron sends both over the world group, so the largest evenly strided group of
  rank 0's inside the one the sends use that holds every peer is the pipeline's: its pipeline group, which only its
  other collectives use; the largest, as a smaller one holding the next stage, a weight tied between two stages say,
  would merge stages, and a larger one only captures more);
- **exchange groups**, each group whose members send to each other *within* a pass (in a module's forward or in a
  backward): context parallelism's ring attention passes keys and values around its group, and an expert-parallel
  all-to-all sends each member its tokens as a send and a receive per member. Their members run the same code with
  other peers and, for a ring, other shapes (a causal ring's load-balanced steps give each member other halves of its
  chunks), so each position in such a group is a class of its own; they are not pipeline stages, and read as one they
  hid the real stages (TP 2 x PP 2 x CP 2: the world group, used by the pipeline, held both the ring's peer and the
  next stage's, so every rank was a stage).
A rank's class is its pipeline stage and its position in each exchange group; without point-to-point traffic all
ranks form one class. A class is checked (`checked`) by capturing its last member and comparing call signatures,
unless one of rank 0's groups of more than one rank lies inside the class and is smaller than it (a tensor-parallel
group, whose lone rank cannot be replayed) or, in a job of more than one class, is the class itself (TP 4 x PP 2 x
DP 1: each check would capture another large rank). A member that differs from its representative (rank 0 logging,
say; `convert.signature`) splits every class alike when they were all checked at once and no group of rank 0 holds
some but not all of a class's members (`crossing`; `launcher._capture_classes`), else is listed in the run's attrs
with the reason (`dedup.unverified`, `dedup.unverified_reason`) and `maya predict` says so. When the layout cannot
be read (`LayoutError`: a group not evenly strided, no group holding the pipeline's peers), every rank is captured
and the attrs say why (`dedup.refused`).

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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from maya.core.pipeline_stages import P2P, ROOTED, Pipeline

REBUILT_FROM = 6
"""Fewest pipeline stages whose interior stages are rebuilt: stages 0, 1, 2, `P - 2` and `P - 1` are captured, so
with 6 one stage (3) is rebuilt."""


LAYOUT_COLUMNS = {
    "api_calls": ("collective_name", "comm_id", "peer_rank", "op_id"),
    "ops": ("op_id", "module_path", "phase", "name"),
}
"""The columns `layout_of` reads of the large tables (a 5M-op trace's ops are mostly shapes)."""

LAYOUT_TABLES = ("api_calls", "communicators", "ops")
"""The tables `layout_of` reads, in the order it takes them."""


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


class LayoutError(ValueError):
    """Rank 0's traffic gives no layout: a group not evenly strided, or no group holding the pipeline's peers."""


def checked(classes: dict[int, list[int]], communicators: pa.Table) -> bool:
    """Whether each class is checked by capturing one more member: not when one of rank 0's `communicators` of more
    than one rank lies inside rank 0's class and is smaller than it (a tensor-parallel group: its lone rank cannot
    be replayed), or, with more than one class, is that class (a TP group as large as a stage's ranks: the check
    would capture another large rank); a group of unlisted ranks counts by its size. Every class is a translate of
    rank 0's (`stage_classes`), so rank 0's tells for all. A group across classes (a ring, an all-to-all, the
    pipeline) does not stop the check, nor does the one class's group of a plain data-parallel job."""
    ours = set(classes[0])
    for ranks, size in _groups(communicators):
        inside = ranks is None or set(ranks) <= ours
        if inside and (1 < size < len(ours) or (size == len(ours) > 1 and len(classes) > 1)):
            return False
    return True


def crossing(classes: dict[int, list[int]], communicators: pa.Table) -> str | None:
    """Which of rank 0's `communicators` holds more than one but not all members of a class (None if none):
    splitting every class alike then misaligns the lists the replay maps that group's members by
    (`simulator/topology.py`); a group of unlisted ranks counts by its size."""
    smallest = min(len(members) for members in classes.values())
    for ranks, size in _groups(communicators):
        if ranks is None and 1 < size < smallest:
            return f"a group of {size} unlisted ranks may hold some of a class of {smallest}"
        for members in () if ranks is None else classes.values():
            if 1 < len(shared := set(ranks) & set(members)) < len(members):
                return f"group {sorted(ranks)} holds {len(shared)} of the {len(members)} ranks of class {members}"
    return None


def _groups(communicators: pa.Table) -> list[tuple[list[int] | None, int]]:
    """(ranks, size) of each of `communicators`, ranks None where not listed."""
    return list(zip(communicators.column("ranks").to_pylist(), communicators.column("comm_size").to_pylist()))


def layout_of(api_calls: pa.Table, communicators: pa.Table, ops: pa.Table | None = None) -> Layout:
    """The pipeline stages and exchange groups read from one rank's point-to-point traffic (its `api_calls`,
    `communicators` and `ops`, of which only the `LAYOUT_COLUMNS` are read: a call whose op has a module path or is in
    the backward phase is within a pass, and a group with one call within a pass is an exchange group; without ops,
    every call is taken to be between passes); `LayoutError` when the groups do not give evenly strided axes or
    no group holds the pipeline's peers. The sends and receives of a scatter or a gather (`ROOTED`) are left out."""
    p2p = _without_rooted(api_calls.filter(pc.is_in(api_calls.column("collective_name"), pa.array(list(P2P)))), ops)
    members = {
        row["comm_id"]: row["ranks"]
        for row in communicators.select(["comm_id", "ranks"]).to_pylist()
        if row["ranks"] and len(row["ranks"]) > 1
    }
    used = pc.unique(p2p.column("comm_id")).to_pylist()  # in order of first use
    inside = _exchange_comms(p2p, ops)
    between = p2p.filter(pc.invert(pc.is_in(p2p.column("comm_id"), pa.array(sorted(inside), pa.string()))))
    pipeline = _pipeline(members, between)
    exchanges: list[Pipeline] = []
    for comm in used:
        if comm in inside and comm in members:
            axis = _strided(sorted(members[comm]), "exchange")
            if axis not in exchanges:
                exchanges.append(axis)
    return Layout(pipeline, tuple(exchanges))


def _without_rooted(p2p: pa.Table, ops: pa.Table | None) -> pa.Table:
    """`p2p` less the calls made by a scatter's or a gather's op (`ROOTED`)."""
    if ops is None or not len(ops) or not len(p2p) or "op_id" not in p2p.column_names or "name" not in ops.column_names:
        return p2p
    rooted = pc.fill_null(pc.is_in(ops.column("name"), pa.array(list(ROOTED))), False).to_numpy()
    if not rooted.any():
        return p2p
    return p2p.filter(pa.array(~_looked_up(ops.column("op_id").to_numpy(), rooted, p2p.column("op_id"))))


def _exchange_comms(p2p: pa.Table, ops: pa.Table | None) -> set[str]:
    """The communicators of `p2p` with a call made within a pass (its op in a module's forward, or in a backward)."""
    if ops is None or not len(ops) or "op_id" not in p2p.column_names:
        return set()
    inside = pc.or_(pc.is_valid(ops.column("module_path")), pc.equal(ops.column("phase"), "backward"))
    within = _looked_up(ops.column("op_id").to_numpy(), pc.fill_null(inside, False).to_numpy(), p2p.column("op_id"))
    return set(pc.unique(p2p.column("comm_id").filter(pa.array(within))).to_pylist())


def _looked_up(ids: np.ndarray, flags: np.ndarray, wanted: pa.ChunkedArray) -> np.ndarray:
    """Per `wanted` op id, the flag of that op (False when absent), by position when the ops are numbered 0, 1, ...
    as they are written, else by a sorted search (a hash set of 5M op ids took 2.4 s, a search in call order 2.9)."""
    keys = pc.fill_null(wanted, -1).to_numpy()
    if not np.array_equal(ids, np.arange(len(ids))):
        order = np.argsort(ids, kind="stable")
        ids, flags = ids[order], flags[order]
        sort = np.argsort(keys, kind="stable")
        at = np.empty_like(sort)
        at[sort] = np.minimum(np.searchsorted(ids, keys[sort]), len(ids) - 1)
        return (ids[at] == keys) & flags[at]
    found = (keys >= 0) & (keys < len(ids))
    out = np.zeros(len(keys), dtype=bool)
    out[found] = flags[keys[found]]
    return out


def _pipeline(members: dict[str, list[int]], between: pa.Table) -> Pipeline | None:
    """The smallest group among those used by the calls `between` passes that holds every peer they reach (peers by
    communicator rank), or the largest evenly strided group of rank 0's strictly inside it that also holds them
    (picotron sends between stages over the world group, to global ranks: its pipeline group, unused by the sends, is
    the stages' axis). Of rank 0's groups holding its peers, a pipeline group and a smaller one (a weight tied between
    the first two of four stages) look alike from rank 0's traffic: the larger is taken, which at worst captures more
    ranks, where the smaller would merge stages. The pipeline group is seen only if a collective used it. `LayoutError`
    when none does (an exchange the passes' ranges did not scope: which axis is the pipeline's is not known)."""
    if "peer_rank" not in between.column_names:
        between = between.append_column("peer_rank", pa.nulls(len(between), pa.int64()))
    pairs = between.group_by(["comm_id", "peer_rank"]).aggregate([]).to_pylist()  # each (group, peer) once
    used_comms = {row["comm_id"] for row in pairs}
    groups = [ranks for comm, ranks in members.items() if comm in used_comms]  # table order: ties are stable
    if not groups:
        return None
    peers = {
        members[comm][peer]
        for comm, peer in ((row["comm_id"], row["peer_rank"]) for row in pairs)
        if comm in members and peer is not None and 0 <= peer < len(members[comm])
    }
    holding = [group for group in groups if peers <= set(group)]
    if not holding:
        raise LayoutError(
            f"no group used between the model's passes holds every peer of rank 0's sends and receives there "
            f"({sorted(peers)}): the pipeline's axis is not known"
        )
    used = set(min(holding, key=len))
    inner = [
        sorted(group)
        for group in members.values()
        if peers and peers <= set(group) and set(group) < used and _evenly_strided(sorted(group))
    ]
    return _strided(max(inner, key=len) if inner else sorted(used), "pipeline")


def _evenly_strided(ranks: list[int]) -> bool:
    """Whether sorted global `ranks` (two or more) are evenly strided."""
    return len(ranks) > 1 and len({b - a for a, b in zip(ranks, ranks[1:])}) == 1 and ranks[1] > ranks[0]


def _strided(ranks: list[int], kind: str) -> Pipeline:
    """The axis of a group of sorted global `ranks`, which must be evenly strided."""
    stride = ranks[1] - ranks[0]
    if any(b - a != stride for a, b in zip(ranks, ranks[1:])) or stride <= 0:
        raise LayoutError(f"{kind} group {ranks} is not evenly strided")
    return Pipeline(len(ranks), stride)
