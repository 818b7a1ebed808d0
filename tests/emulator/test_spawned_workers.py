"""`torch.multiprocessing.spawn` in an emulated rank: the rank runs the worker of its local index, in itself."""

import sys

import pytest
import torch.multiprocessing as mp

from maya.emulator import spawned_workers
from maya.emulator.spawned_workers import SpawnNotEmulated


@pytest.fixture
def second_of_two_gpus(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("MAYA_EMU_LAUNCH", raising=False)  # a job given as `python SCRIPT`
    for owner in (mp, sys.modules["torch.multiprocessing.spawn"]):  # install() replaces them: torch's come back
        for name in ("spawn", "start_processes"):
            monkeypatch.setattr(owner, name, getattr(owner, name))


def test_the_ranks_worker_runs_in_the_rank(second_of_two_gpus):
    """`mp.spawn(fn, args, nprocs=2)` on local rank 1 of a two-GPU node calls `fn(1, *args)` here, once, and
    returns as a joined spawn does (None)."""
    calls = []
    spawned_workers.install()
    assert mp.spawn(lambda i, a, b: calls.append((i, a, b)), args=("x", 2), nprocs=2) is None
    assert calls == [(1, "x", 2)]
    mp.start_processes(lambda i: calls.append(i), nprocs=2, start_method="fork")
    assert calls[-1] == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nprocs": 4}, "spawns 4 worker\\(s\\) in a job of 2 GPU\\(s\\) per node.*--nproc-per-node 4"),
        ({"nprocs": 2, "join": False}, "join=False"),
    ],
)
def test_spawns_the_rank_cannot_stand_for_fail_naming_them(second_of_two_gpus, kwargs, message):
    """Workers that are not the job's ranks (another count), or a spawn whose running processes the script watches
    (join=False), would run unrecorded in spawned interpreters: refused, saying what to give."""
    spawned_workers.install()
    called = []
    with pytest.raises(SpawnNotEmulated, match=message):
        mp.spawn(called.append, **kwargs)
    assert not called


def test_a_spawn_in_a_rank_a_launcher_started_is_refused(second_of_two_gpus, monkeypatch):
    """Under `maya emulate -- torchrun ...` the launcher started the job's ranks: a spawn of as many workers as the
    node's GPUs (data preparation, say) would otherwise run one worker in the rank, with no error; refused, naming
    the spawn and the launch."""
    monkeypatch.setenv("MAYA_EMU_LAUNCH", "torchrun --nproc-per-node 2 t.py")
    spawned_workers.install()
    called = []
    with pytest.raises(SpawnNotEmulated, match="spawn of 2 worker\\(s\\) in a rank `torchrun --nproc-per-node 2 t.py`"):
        mp.spawn(called.append, nprocs=2)
    assert not called


def test_a_spawn_in_a_job_of_several_nodes_is_refused(second_of_two_gpus, monkeypatch):
    """The tutorial's workers number themselves 0..nprocs-1: on the second node of two they would record as the
    first node's ranks. Refused, saying to emulate one node."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    spawned_workers.install()
    with pytest.raises(SpawnNotEmulated, match="in a job of 2 nodes.*--nnodes 1 --nproc-per-node 2"):
        mp.spawn(print, nprocs=2)


@pytest.mark.parametrize(
    "url, message",
    [
        ("env://?rank=1&world_size=2", "init_process_group\\(rank=1\\): this emulated rank is RANK=3"),
        ("tcp://127.0.0.1:1?rank=3&world_size=2", "world_size=2\\): this emulated rank is WORLD_SIZE=4"),
    ],
)
def test_a_rank_numbered_by_the_script_must_agree_with_the_job(monkeypatch, url, message):
    """`init_process_group(rank=i, world_size=n)` that disagrees with the rank the emulator runs (RANK/WORLD_SIZE)
    would record the capture as another rank: refused, naming both; agreeing values rendezvous."""
    from maya.emulator.isolation import _handler

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=message):
        next(_handler(url))
    _, rank, world = next(_handler("env://?rank=3&world_size=4"))
    assert (rank, world) == (3, 4)
