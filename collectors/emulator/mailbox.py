"""Python objects sent between isolated ranks (`send_object_list`/`recv_object_list`), through files.

Tensors between ranks are emulated SPMD-style (receive buffers filled without a peer), but a pickled
object has to be the one the peer really sent: torch.distributed.pipelining exchanges each stage's
input/output metadata this way before training. In an emulated rank, `send_object_list` writes the
objects to `$MAYA_EMU_MAILBOX/<src>-<dst>-<n>.pkl` and `recv_object_list` waits for that file,
asking the launcher (`want-<src>`) to emulate the sender if it is not running yet. Neither touches
NCCL, so the trace holds no unmatched point-to-point call. A sender that ended (`ended-<rank>`)
without sending, or a wait past the timeout, fails with an error naming both ranks.
"""
from __future__ import annotations

import os
import pickle
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

TIMEOUT_S = float(os.environ.get("MAYA_EMU_MAILBOX_TIMEOUT", "600"))
POLL_S = 0.01


def message_path(mailbox: Path, src: int, dst: int, n: int) -> Path:
    return mailbox / f"{src}-{dst}-{n}.pkl"


def mark_ended(mailbox: Path, rank: int) -> None:
    (mailbox / f"ended-{rank}").touch()


def install(mailbox: Path, rank: int) -> None:
    """Replace torch.distributed's object point-to-point functions in this rank process."""
    import torch.distributed as dist

    sent: dict[int, int] = defaultdict(int)
    received: dict[int, int] = defaultdict(int)

    def global_rank(group, peer: int | None, group_peer: int | None, what: str) -> int:
        if group_peer is not None:
            return dist.get_global_rank(group, group_peer) if group is not None else group_peer
        if peer is None:
            raise RuntimeError(f"maya emulator: {what} without a peer rank cannot be emulated in isolation")
        return peer

    def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False,
                         weights_only=False) -> None:
        dst = global_rank(group, dst, group_dst, "send_object_list")
        path = message_path(mailbox, rank, dst, sent[dst])
        sent[dst] += 1
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(list(object_list)))
        tmp.rename(path)

    def recv_object_list(object_list, src=None, group=None, device=None, group_src=None, use_batch=False,
                         weights_only=False) -> int:
        src = global_rank(group, src, group_src, "recv_object_list from any source")
        path = message_path(mailbox, src, rank, received[src])
        received[src] += 1
        (mailbox / f"want-{src}").touch()
        deadline = time.monotonic() + TIMEOUT_S
        while not path.exists():
            if (mailbox / f"ended-{src}").exists() and not path.exists():
                raise RuntimeError(f"maya emulator: rank {rank} waits for objects from rank {src} "
                                   f"(recv_object_list), which ended without sending them")
            if time.monotonic() > deadline:
                raise RuntimeError(f"maya emulator: rank {rank} waited {TIMEOUT_S:.0f} s for objects from rank "
                                   f"{src} (recv_object_list); is rank {src} part of the emulated world?")
            time.sleep(POLL_S)
        objects = pickle.loads(path.read_bytes())
        object_list[:len(objects)] = objects
        return src

    dist.send_object_list = send_object_list
    dist.recv_object_list = recv_object_list


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
