"""DCP's save plans of a rank's peers, built for its coordinator from this rank's (no emulator needed).

torch's fake process group stands for a world of several ranks in this one process: the DTensors are
this rank's shards, as in an emulated rank, and DCP's own planner and checks judge the peers' plans.
"""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint import default_planner, planner_helpers
from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from maya.emulator import checkpoint_plans


@pytest.fixture
def world(monkeypatch):
    """A fake world of `size` ranks seen from rank 0, DCP's DTensor layouts recorded as in a rank."""
    monkeypatch.setattr(checkpoint_plans, "_layouts", {})
    monkeypatch.setattr(
        planner_helpers, "_create_write_items_for_dtensor", planner_helpers._create_write_items_for_dtensor
    )
    checkpoint_plans.install()  # the helpers are imported: wrapped at once

    def start(size: int) -> None:
        dist.init_process_group("fake", rank=0, world_size=size, store=FakeStore())

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def _shard(mesh, placements, shape: tuple[int, ...]) -> DTensor:
    """Rank 0's shard of a `shape` tensor laid out by `placements` on `mesh`."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local_shape, _ = compute_local_shape_and_global_offset(shape, mesh, placements)
    stride = torch.empty(shape).stride()
    local = torch.zeros(local_shape)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=torch.Size(shape), stride=stride)


def _planner(state: dict) -> default_planner.DefaultSavePlanner:
    """DCP's planner on rank 0, its coordinator, as a save sets it up."""
    planner = default_planner.DefaultSavePlanner()
    planner.set_up_planner(state_dict=state, is_coordinator=True)
    return planner


def test_fsdp_shards_cover_each_tensor_once_with_uneven_splits(world):
    world(2)
    mesh = init_device_mesh("cpu", (2,))
    state = {"w": _shard(mesh, [Shard(0)], (5, 3)), "step": torch.tensor(3.0), "lr": 0.1}
    plan = _planner(state).create_local_plan()

    plans = checkpoint_plans.peer_objects(plan, None, 2)

    assert _check_chunks(plans, "w") == [((0, 0), (3, 3)), ((3, 0), (2, 3))]
    _planner(state).create_global_plan(plans)  # DCP's deduplication, then the check that failed on copies
    with pytest.raises(ValueError, match="invalid fill"):  # every peer's plan a copy of rank 0's, as before
        _planner(state).create_global_plan([plan, plan])
    assert [item.index.fqn for item in plans[1].items] == [item.index.fqn for item in plan.items]


def _check_chunks(plans, fqn: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [
        (tuple(item.tensor_data.chunk.offsets), tuple(item.tensor_data.chunk.sizes))
        for plan in plans
        for item in plan.items
        if item.index.fqn == fqn
    ]


def test_hsdp_replicas_write_the_same_chunks(world):
    world(4)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    state = {"w": _shard(mesh, [Replicate(), Shard(0)], (8, 2))}
    plan = _planner(state).create_local_plan()

    plans = checkpoint_plans.peer_objects(plan, None, 4)

    offsets = [chunk[0] for chunk in _check_chunks(plans, "w")]
    assert offsets == [(0, 0), (4, 0), (0, 0), (4, 0)]  # ranks 0, 1, 2, 3: mesh [[0, 1], [2, 3]]
    _planner(state).create_global_plan(plans)


def test_other_objects_and_plans_without_dtensors_are_copies(world):
    world(2)
    plan = _planner({"step": torch.tensor(1.0)}).create_local_plan()
    assert checkpoint_plans.peer_objects(plan, None, 2) == [plan, plan]
    assert checkpoint_plans.peer_objects({"keys": ["a"]}, None, 2) == [{"keys": ["a"]}, {"keys": ["a"]}]


def test_a_plain_tensor_named_as_an_earlier_dtensor_is_not_moved(world):
    """A layout is recorded by name: a later save's plain tensor of that name and shape is written whole by every
    rank, not given the DTensor's chunk (DCP's global plan then failed: `item.index.fqn not in md`)."""
    world(2)
    mesh = init_device_mesh("cpu", (2,))
    _planner({"w": _shard(mesh, [Shard(0)], (4, 2))}).create_local_plan()
    state = {"w": torch.zeros(4, 2)}
    plan = _planner(state).create_local_plan()

    plans = checkpoint_plans.peer_objects(plan, None, 2)

    assert plans == [plan, plan]
    _planner(state).create_global_plan(plans)


def test_a_shard_whose_chunk_the_recorded_layout_does_not_give_fails(world):
    """A shard item whose own chunk is not the one its recorded layout gives this rank (a layout recorded for another
    tensor of that name): its peers' chunks are not known, and the gather fails rather than guess."""
    world(2)
    mesh = init_device_mesh("cpu", (2,))
    plan = _planner({"w": _shard(mesh, [Shard(0)], (4, 2))}).create_local_plan()
    checkpoint_plans._layouts["w"] = checkpoint_plans.Layout(mesh, (Shard(1),), (4, 2))

    with pytest.raises(checkpoint_plans.PeerPlanError, match=r"'w'.*Shard\(dim=1\).*own chunk"):
        checkpoint_plans.peer_objects(plan, None, 2)


def test_a_peer_outside_a_dtensors_mesh_fails(world):
    """Pipeline parallel by FSDP: ranks 2 and 3, the other stage, hold other parameters that this rank cannot know
    (DCP would accept plans without them, and save a checkpoint without that stage)."""
    world(4)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    plan = _planner({"layers.0.w": _shard(mesh["dp"], [Shard(0)], (6, 2))}).create_local_plan()

    with pytest.raises(checkpoint_plans.PeerPlanError, match=r"rank 2: DTensor 'layers\.0\.w' is on a mesh of ranks"):
        checkpoint_plans.peer_objects(plan, None, 4)


def test_a_chunk_torch_cannot_compute_fails_naming_the_tensor(world, monkeypatch):
    """No silent copy where torch's function fails for a peer (another torch's mesh or placements): one error naming
    the tensor and its placements."""
    from torch.distributed.tensor import _utils

    world(2)
    mesh = init_device_mesh("cpu", (2,))
    plan = _planner({"w": _shard(mesh, [Shard(0)], (4, 2))}).create_local_plan()

    def fails(*args):
        raise ValueError("no such placement")

    monkeypatch.setattr(_utils, "compute_local_shape_and_global_offset", fails)
    with pytest.raises(checkpoint_plans.PeerPlanError, match=r"'w' \(placements \[Shard\(dim=0\)\].*no such placement"):
        checkpoint_plans.peer_objects(plan, None, 2)
