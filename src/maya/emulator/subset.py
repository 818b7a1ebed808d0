"""Which ranks a subset's captures stand for (`maya emulate --ranks`): an SPMD job is assumed, with the
pipeline stages and the positions in exchange groups (context-parallel rings, expert all-to-alls) as its only
asymmetries.

A script run on a few of its ranks (`--ranks 0` of a ZeRO-3 job whose isolated ranks cannot all run, or one
rank of a 4,096-rank job) is taken to be SPMD: every uncaptured rank does the work of the captured rank of its
equivalence class (`dedup.stage_classes`: the pipeline stages and exchange groups, read from a captured rank's
point-to-point traffic; one class without it). Unlike deduplication, no second capture verifies it (the point of a
subset is not to run the other ranks), so the run's attrs list the ranks assumed (`represents_assumed`) and
`maya predict` says so. A stage none of whose ranks was captured stays unrepresented: `maya predict` refuses
the run, naming the missing ranks, rather than replay another stage's program for it.
"""

from __future__ import annotations

import pyarrow as pa

from .dedup import layout_of, stage_classes


def subset_represents(
    world_size: int, captured: list[int], api_calls: pa.Table, communicators: pa.Table, ops: pa.Table | None = None
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """`(represents, assumed)` for the `captured` ranks (sorted) of a `world_size`-rank job, given one captured
    rank's `api_calls`, `communicators` and `ops` (`dedup.layout_of`): each class's lowest captured rank stands
    for the class's uncaptured ranks (its list starts at itself and follows the class's ranks cyclically, as device
    meshes lay them out), the other captured ranks for themselves; `assumed` maps a rank to the uncaptured ranks it
    stands for. `dedup.LayoutError` when the layout cannot be read."""
    represents = {rank: [rank] for rank in captured}
    assumed: dict[int, list[int]] = {}
    taken = set(captured)
    for members in stage_classes(world_size, layout_of(api_calls, communicators, ops)).values():
        ours = [rank for rank in members if rank in taken]
        if not ours or len(ours) == len(members):
            continue
        rep = ours[0]
        at = members.index(rep)
        others = [rank for rank in members[at + 1 :] + members[:at] if rank not in taken]
        represents[rep] = [rep, *others]
        assumed[rep] = sorted(others)
    return represents, assumed
