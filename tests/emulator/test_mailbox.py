"""Objects exchanged between isolated ranks through the launcher's mailbox (no emulator needed)."""

import threading

import pytest
import torch.distributed as dist

from maya.emulator import mailbox


@pytest.fixture
def as_rank(monkeypatch, tmp_path):
    """Install the mailbox as rank `rank`; torch.distributed is restored after the test."""
    for name in (
        "send_object_list",
        "recv_object_list",
        "broadcast_object_list",
        "scatter_object_list",
        "all_gather_object",
        "gather_object",
        "broadcast",
    ):  # everything mailbox.install replaces
        monkeypatch.setattr(dist, name, getattr(dist, name))
    monkeypatch.setattr(dist.distributed_c10d, "broadcast", dist.distributed_c10d.broadcast)

    def install(rank: int):
        mailbox.install(tmp_path, rank)
        return dist.send_object_list, dist.recv_object_list

    return install


def test_objects_arrive_in_order_and_in_place(as_rank, tmp_path):
    send, _ = as_rank(0)
    send([{"shape": (4, 8)}], dst=1)
    send(["second"], dst=1)
    _, recv = as_rank(1)
    first, second = [None], [None]
    assert recv(first, src=0) == 0
    recv(second, src=0)
    assert first == [{"shape": (4, 8)}] and second == ["second"]
    assert (tmp_path / "want-0").exists()  # the receiver asked for its sender


def test_receiver_waits_for_a_late_sender(as_rank):
    _, recv = as_rank(1)
    got = [None]
    waiter = threading.Thread(target=recv, args=(got,), kwargs={"src": 0}, daemon=True)
    waiter.start()
    send, _ = as_rank(0)
    send(["late"], dst=1)
    waiter.join(timeout=10)
    assert got == ["late"]


def test_a_sender_that_ended_without_sending_is_named(as_rank, tmp_path):
    _, recv = as_rank(3)
    mailbox.mark_ended(tmp_path, 2)
    with pytest.raises(RuntimeError, match="rank 3 waits for objects from rank 2.*ended without sending"):
        recv([None], src=2)


def test_a_receive_from_any_source_is_refused(as_rank):
    _, recv = as_rank(1)
    with pytest.raises(RuntimeError, match="without a peer rank"):
        recv([None])


def test_watcher_starts_each_wanted_rank_once_and_ends_unknown_ones(tmp_path):
    started: list[int] = []
    with mailbox.Watcher(tmp_path, 4, started.append):
        (tmp_path / "want-2").touch()
        (tmp_path / "want-9").touch()
        deadline = threading.Event()
        for _ in range(100):
            if started and (tmp_path / "ended-9").exists():
                break
            deadline.wait(0.05)
    assert started == [2]
    assert (tmp_path / "ended-9").exists()


def test_broadcast_calls_a_torch_without_group_src_as_it_is_called(as_rank, monkeypatch):
    """torch 2.5's broadcast takes no `group_src` (2.6 added it): the wrapper passed it always, so every
    broadcast failed under torch 2.5 (tensor_parallel_mlp, fsdp_tp_mesh: DTensor's mesh broadcasts)."""
    import torch

    calls = []

    def broadcast_2_5(tensor, src, group=None, async_op=False):  # torch 2.5.1's signature
        calls.append((src, group, async_op))

    monkeypatch.setattr(dist, "broadcast", broadcast_2_5)
    as_rank(0)
    dist.broadcast(torch.zeros(4), src=0)
    dist.broadcast(torch.zeros(4), 0, None, True)
    assert calls == [(0, None, False), (0, None, True)]
    with pytest.raises(TypeError, match="group_src"):  # as torch 2.5 itself answers
        dist.broadcast(torch.zeros(4), group_src=0)
