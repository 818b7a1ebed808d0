"""torch.distributed's object collectives between isolated ranks: through files, or SPMD-style.

Tensors between ranks are emulated SPMD-style (receive buffers filled without a peer), but a pickled
object cannot be: its bytes would be garbage. So in an emulated rank:
- `send_object_list`/`recv_object_list` (torch.distributed.pipelining exchanges stage shapes this
  way) and `broadcast_object_list`/`scatter_object_list` deliver the sender's real objects through
  `$MAYA_EMU_MAILBOX`: the sender writes a file, the receiver waits for it and asks the launcher
  (`want-<src>`) to emulate the sender if it is not running yet;
- `all_gather_object`/`gather_object` are SPMD: every peer's object is a copy of this rank's, except a
  torch.distributed.checkpoint save plan, which is the peer's own (`checkpoint_plans.py`);
- a `broadcast` of a small tensor (up to `SMALL_BROADCAST_BYTES`: a count, a flag, ids that ranks check
  they agree on, as DeepSpeed ZeRO-3 does) is recorded as the NCCL call it is, and the source's bytes are
  delivered through the mailbox into the receivers' buffers (emulated device memory is host memory), so
  what the receivers read is what the source sent, not their own data.
The object collectives touch no NCCL, so the trace holds no one-sided call. A sender that ended
(`ended-<rank>`) without sending, or a wait past the timeout, fails with an error naming both ranks.
"""

from __future__ import annotations

import ctypes
import pickle
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from maya.core import settings

from . import checkpoint_plans

POLL_S = 0.01
SMALL_BROADCAST_BYTES = 4096
"""Broadcasts of tensors up to this size deliver the source's bytes; larger ones stay SPMD (own data)."""


def mark_ended(mailbox: Path, rank: int) -> None:
    (mailbox / f"ended-{rank}").touch()


def _deliver(path: Path, objects: list) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(objects))
    tmp.rename(path)


def _receive(mailbox: Path, path: Path, rank: int, src: int, what: str) -> list:
    (mailbox / f"want-{src}").touch()
    timeout_s = settings.mailbox_timeout_s()
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if (mailbox / f"ended-{src}").exists() and not path.exists():
            raise RuntimeError(
                f"maya emulator: rank {rank} waits for objects from rank {src} ({what}), "
                "which ended without sending them"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"maya emulator: rank {rank} waited {timeout_s:.0f} s for objects from rank {src} "
                f"({what}); is rank {src} part of the emulated world?"
            )
        time.sleep(POLL_S)
    return pickle.loads(path.read_bytes())


def install(mailbox: Path, rank: int) -> None:
    """Replace torch.distributed's object collectives in this rank process."""
    import torch.distributed as dist

    checkpoint_plans.install()

    counters: dict[tuple, int] = defaultdict(int)

    def next_path(kind: str, *key) -> Path:
        n = counters[(kind, *key)]
        counters[(kind, *key)] += 1
        return mailbox / f"{kind}-{'-'.join(map(str, key))}-{n}.pkl"

    def global_rank(group, peer: int | None, group_peer: int | None, what: str) -> int:
        if group_peer is not None:
            return dist.get_global_rank(group, group_peer) if group is not None else group_peer
        if peer is None:
            raise RuntimeError(f"maya emulator: {what} without a peer rank cannot be emulated in isolation")
        return peer

    def group_name(group) -> str:
        return (group or dist.group.WORLD).group_name

    def send_object_list(
        object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False, weights_only=False
    ) -> None:
        dst = global_rank(group, dst, group_dst, "send_object_list")
        _deliver(next_path("p2p", rank, dst), list(object_list))

    def recv_object_list(
        object_list, src=None, group=None, device=None, group_src=None, use_batch=False, weights_only=False
    ) -> int:
        src = global_rank(group, src, group_src, "recv_object_list from any source")
        objects = _receive(mailbox, next_path("p2p", src, rank), rank, src, "recv_object_list")
        object_list[: len(objects)] = objects
        return src

    def broadcast_object_list(
        object_list, src=None, group=None, device=None, group_src=None, weights_only=False
    ) -> None:
        src = global_rank(group, src, group_src, "broadcast_object_list")
        path = next_path("bcast", group_name(group), src)
        if rank == src:
            _deliver(path, list(object_list))
        else:
            object_list[:] = _receive(mailbox, path, rank, src, "broadcast_object_list")

    def scatter_object_list(
        scatter_object_output_list,
        scatter_object_input_list=None,
        src=None,
        group=None,
        group_src=None,
        weights_only=False,
    ) -> None:
        src = global_rank(group, src, group_src, "scatter_object_list")
        path = next_path("scatter", group_name(group), src)
        if rank == src:
            objects = list(scatter_object_input_list)
            _deliver(path, objects)
        else:
            objects = _receive(mailbox, path, rank, src, "scatter_object_list")
        scatter_object_output_list[0] = objects[dist.get_rank(group)]

    def all_gather_object(object_list, obj, group=None) -> None:
        object_list[:] = checkpoint_plans.peer_objects(obj, group, len(object_list))

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None) -> None:
        if object_gather_list is not None:
            object_gather_list[:] = checkpoint_plans.peer_objects(obj, group, len(object_gather_list))

    nccl_broadcast = dist.broadcast

    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        # group_src only when given: torch < 2.6's broadcast has no such argument
        given = {"group_src": group_src} if group_src is not None else {}
        work = nccl_broadcast(tensor, src=src, group=group, async_op=async_op, **given)
        size = tensor.numel() * tensor.element_size()
        if (
            not tensor.is_cuda
            or not tensor.is_contiguous()
            or not 0 < size <= SMALL_BROADCAST_BYTES
            or dist.distributed_c10d._rank_not_in_group(group)
            or dist.get_world_size(group) == 1
        ):
            return work
        src = global_rank(group, src, group_src, "broadcast")
        path = next_path("tensor-bcast", group_name(group), src)
        if rank == src:
            _deliver(path, [ctypes.string_at(tensor.data_ptr(), size)])
        else:
            ctypes.memmove(tensor.data_ptr(), _receive(mailbox, path, rank, src, "broadcast")[0], size)
        return work

    dist.broadcast = dist.distributed_c10d.broadcast = broadcast
    dist.send_object_list, dist.recv_object_list = send_object_list, recv_object_list
    dist.broadcast_object_list, dist.scatter_object_list = broadcast_object_list, scatter_object_list
    dist.all_gather_object, dist.gather_object = all_gather_object, gather_object


class Watcher:
    """Launcher side: starts (once) every rank another rank waits for."""

    def __init__(self, mailbox: Path, world_size: int, start: Callable[[int], object]):
        self.mailbox, self.world_size, self.start = mailbox, world_size, start
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maya-mailbox", daemon=True)

    def __enter__(self) -> Watcher:
        self.mailbox.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for want in self.mailbox.glob("want-*"):
                if want.name in self._seen:
                    continue
                self._seen.add(want.name)
                rank = int(want.name.split("-", 1)[1])
                if 0 <= rank < self.world_size:
                    self.start(rank)
                else:
                    mark_ended(self.mailbox, rank)
