"""Peers' save plans for torch.distributed.checkpoint (DCP) in an isolated rank.

DCP's save gathers every rank's local `SavePlan` on its coordinator, which deduplicates the write
items and checks that the chunks of each tensor cover it exactly. Object gathers are SPMD in an emulated
rank (`mailbox.py`: every peer's object is a copy of this rank's), so the coordinator saw its own shard
of each DTensor once per rank: deduplicated to one, the chunks covered 1/N of the tensor, and DCP failed
("Failed to validate global plan: ... invalid fill"): OLMo-core's trainer saves step 0 so, on 2 or more
GPUs.

Here the peers' plans are built as DCP builds them on the peers: the same write items, each DTensor's
chunk (offsets and sizes) computed for the peer's coordinate in the DTensor's mesh by torch's own
`compute_local_shape_and_global_offset`; a peer outside a DTensor's mesh writes no chunk of it, as DCP's
`create_default_local_save_plan` skips it there. The DTensors' layouts are recorded as DCP makes their
write items (`planner_helpers._create_write_items_for_dtensor`, wrapped once that module is imported,
so a script that never checkpoints imports nothing). A plan with no recorded DTensor, or a peer whose
chunk cannot be computed, is the plain copy it was.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from types import ModuleType
from typing import Any, NamedTuple

HELPERS = "torch.distributed.checkpoint.planner_helpers"


class Layout(NamedTuple):
    """How a DTensor is laid out: what a peer's chunk is computed from."""

    mesh: Any
    placements: tuple
    global_shape: tuple[int, ...]


_layouts: dict[str, Layout] = {}
"""The layout of each DTensor whose write item DCP made in this process, by fully qualified name."""


def _record_layouts(helpers: ModuleType) -> None:
    create = helpers._create_write_items_for_dtensor

    def create_and_record(fqn: str, tensor: Any) -> Any:
        item = create(fqn, tensor)
        _layouts[fqn] = Layout(tensor.device_mesh, tuple(tensor.placements), tuple(tensor.shape))
        return item

    helpers._create_write_items_for_dtensor = create_and_record


def install() -> None:
    """Record the DTensors' layouts from DCP's write items, now or when DCP's helpers are imported."""
    if HELPERS in sys.modules:
        _record_layouts(sys.modules[HELPERS])
        return
    from .triton_launches import AfterImport

    sys.meta_path.insert(0, AfterImport({HELPERS: _record_layouts}))


class _PeerMesh:
    """A device mesh as a peer sees it: its coordinate, the real mesh for everything else."""

    def __init__(self, mesh: Any, coordinate: list[int]):
        self._mesh, self._coordinate = mesh, coordinate

    def get_coordinate(self) -> list[int]:
        return list(self._coordinate)

    def _sym_get_coordinate(self, dim: int) -> int:
        return self._coordinate[dim]

    def _is_current_rank_part_of_mesh(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mesh, name)


def _coordinate(mesh: Any, rank: int) -> list[int] | None:
    where = (mesh.mesh == rank).nonzero()
    return [int(i) for i in where[0]] if len(where) else None


def _chunk_for(layout: Layout, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The (sizes, offsets) of `rank`'s chunk of a DTensor; None where the rank is outside its mesh."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    coordinate = _coordinate(layout.mesh, rank)
    if coordinate is None:
        return None
    return compute_local_shape_and_global_offset(
        layout.global_shape, _PeerMesh(layout.mesh, coordinate), layout.placements
    )


def peer_plan(plan: Any, rank: int) -> Any:
    """The save plan global `rank` makes where this rank made `plan`: its DTensors' chunks moved."""
    import torch

    items = []
    for item in plan.items:
        layout = _layouts.get(item.index.fqn) if item.tensor_data is not None else None
        if layout is None or tuple(item.tensor_data.size) != layout.global_shape:
            items.append(item)
            continue
        chunk = _chunk_for(layout, rank)
        if chunk is None:
            continue
        sizes, offsets = torch.Size(chunk[0]), torch.Size(chunk[1])
        items.append(
            dataclasses.replace(
                item,
                index=dataclasses.replace(item.index, offset=offsets),
                tensor_data=dataclasses.replace(
                    item.tensor_data,
                    chunk=dataclasses.replace(item.tensor_data.chunk, offsets=offsets, sizes=sizes),
                ),
            )
        )
    return dataclasses.replace(plan, items=items)


def _is_save_plan(obj: Any) -> bool:
    planner = sys.modules.get("torch.distributed.checkpoint.planner")
    return planner is not None and isinstance(obj, planner.SavePlan)


def peer_objects(obj: Any, group: Any, n: int) -> list:
    """What `n` members of `group` contribute to an object gather where this rank contributes `obj`:
    copies of it, or, for a DCP save plan, each member's own plan."""
    data = pickle.dumps(obj)
    copies = [pickle.loads(data) for _ in range(n)]
    if not _layouts or not _is_save_plan(obj):
        return copies
    import torch.distributed as dist

    ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
    if len(ranks) != n:
        return copies
    plans = []
    for rank, copy in zip(ranks, copies, strict=True):
        try:
            plans.append(peer_plan(copy, rank))
        except (AttributeError, IndexError, RuntimeError, TypeError, ValueError):  # a layout torch cannot
            # compute for a peer (another torch's mesh or placements): the plain copy, as before
            plans.append(copy)
    return plans
