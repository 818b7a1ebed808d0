"""Peers' save plans for torch.distributed.checkpoint (DCP) in an isolated rank.

DCP's save gathers every rank's local `SavePlan` on its coordinator, which deduplicates the write
items and checks that the chunks of each tensor cover it exactly. Object gathers are SPMD in an emulated
rank (`mailbox.py`: every peer's object is a copy of this rank's), so the coordinator saw its own shard
of each DTensor once per rank: deduplicated to one, the chunks covered 1/N of the tensor, and DCP failed
("Failed to validate global plan: ... invalid fill"): OLMo-core's trainer saves step 0 so, on 2 or more
GPUs.

Here the peers' plans are built as DCP builds them on the peers: the same write items, each DTensor's
chunk (offsets and sizes) computed for the peer's coordinate in the DTensor's mesh by torch's own
`compute_local_shape_and_global_offset`. The DTensors' layouts are recorded as DCP makes their write items
(`planner_helpers._create_write_items_for_dtensor`, wrapped once that module is imported, so a script that
never checkpoints imports nothing). Only shard write items (`WriteItemType.SHARD`) of a recorded DTensor are
moved, and only once the layout gives this rank's own item its chunk (a plain tensor, or a layout recorded for
another tensor of that name, is not moved). A plan with no such item is the plain copy it was.

Where a peer's plan cannot be made so, the gather fails with `PeerPlanError` naming the tensor, never a plan
that differs silently from the peer's: a peer outside a DTensor's mesh (another pipeline stage, whose state
dict is not this rank's), a chunk torch cannot compute for the peer, a layout that does not give this rank's
own chunk, a group whose members are not the gather's.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

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


class PeerPlanError(RuntimeError):
    """A peer's DCP save plan that cannot be built from this rank's."""


def _chunk_for(fqn: str, layout: Layout, rank: int) -> tuple[torch.Size, torch.Size] | None:
    """The (sizes, offsets) of global `rank`'s chunk of DTensor `fqn`; None where the rank is outside its mesh."""
    import torch
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    try:
        coordinate = _coordinate(layout.mesh, rank)
        if coordinate is None:
            return None
        sizes, offsets = compute_local_shape_and_global_offset(
            layout.global_shape, _PeerMesh(layout.mesh, coordinate), layout.placements
        )
    except (AttributeError, IndexError, RuntimeError, TypeError, ValueError) as e:  # another torch's mesh, say
        raise PeerPlanError(
            f"DCP save plan of rank {rank}: the chunk of DTensor {fqn!r} (placements {list(layout.placements)}, "
            f"shape {list(layout.global_shape)}) cannot be computed for it: {type(e).__name__}: {e}"
        ) from e
    return torch.Size(sizes), torch.Size(offsets)


def _moved_items(plan: Any, rank: int) -> dict[int, Layout]:
    """The items of this rank's (global `rank`'s) `plan` whose chunk a peer makes for itself, by position, with their
    DTensor's layout: shard items of a recorded DTensor of that shape, the layout giving this rank's item its own
    chunk (`PeerPlanError` where it does not)."""
    from torch.distributed.checkpoint.planner import WriteItemType

    moved = {}
    for k, item in enumerate(plan.items):
        layout = _layouts.get(item.index.fqn) if item.tensor_data is not None else None
        if layout is None or item.type != WriteItemType.SHARD:
            continue
        own = (tuple(item.tensor_data.chunk.sizes), tuple(item.tensor_data.chunk.offsets))
        chunk = (
            _chunk_for(item.index.fqn, layout, rank) if tuple(item.tensor_data.size) == layout.global_shape else None
        )
        if chunk is None or (tuple(chunk[0]), tuple(chunk[1])) != own:
            raise PeerPlanError(
                f"DCP save plan: the recorded layout of DTensor {item.index.fqn!r} (placements "
                f"{list(layout.placements)}, shape {list(layout.global_shape)}) does not give rank {rank}'s own "
                f"chunk (sizes {list(own[0])}, offsets {list(own[1])}; shape {list(item.tensor_data.size)}): "
                "the shard is no DTensor made so, and its peers' chunks are not known"
            )
        moved[k] = layout
    return moved


def peer_plan(plan: Any, rank: int, moved: dict[int, Layout]) -> Any:
    """The save plan global `rank` makes where this rank made `plan`: the chunks of its `moved` items (`_moved_items`)
    computed for `rank`. `PeerPlanError` where `rank` is outside one's mesh: its state dict is not this rank's."""
    items = list(plan.items)
    for k, layout in moved.items():
        item = items[k]
        chunk = _chunk_for(item.index.fqn, layout, rank)
        if chunk is None:
            members = layout.mesh.mesh.flatten().tolist()
            raise PeerPlanError(
                f"DCP save plan of rank {rank}: DTensor {item.index.fqn!r} is on a mesh of ranks {members}, without "
                f"rank {rank}, which saves another state dict (another pipeline stage?) that an emulated rank "
                "cannot know"
            )
        sizes, offsets = chunk
        items[k] = dataclasses.replace(
            item,
            index=dataclasses.replace(item.index, offset=offsets),
            tensor_data=dataclasses.replace(
                item.tensor_data,
                chunk=dataclasses.replace(item.tensor_data.chunk, offsets=offsets, sizes=sizes),
            ),
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

    moved = _moved_items(obj, dist.get_rank())
    if not moved:
        return copies
    ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
    if len(ranks) != n:
        raise PeerPlanError(f"DCP save plan: a gather of {n} objects in a group of {len(ranks)} ranks ({ranks})")
    return [peer_plan(copy, rank, moved) for rank, copy in zip(ranks, copies, strict=True)]
