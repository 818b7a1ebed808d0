"""Files a peer removed after a barrier, as seen by the ranks that in the real job had not yet reached it.

A node-local signal file (Composer's `local_rank_zero_download_and_wait`, which llm-foundry's tokenizer,
fine-tuning data and autoresume set-up use): local rank 0 writes a file, every rank passes `dist.barrier()`,
then local rank 0 removes the file; the other local ranks wait for the file to exist before that barrier. An
isolated rank's barrier returns at once, so local rank 0 removes the file before a peer that runs after it
(deduplication's check rank) or beside it polls for it, and the peer waits forever. In the real job the file
is there for every rank until all have reached that barrier.

So in an emulated rank (the job's ranks share one file system, as a node's local ranks do):
- `torch.distributed.barrier` counts the barriers the rank has passed, with the time it passed each;
- `os.remove`/`os.unlink` of a regular file appends to the job's journal (`removed.jsonl` in the mailbox)
  the file's absolute path, how many barriers the remover had passed when the file was last written (its
  mtime against the barriers' times) and when it removed it;
- `os.path.exists` of a missing path is True when a peer's entry says that a rank which has passed `n`
  barriers would see the file: written before the remover passed barrier `n + 1` and removed after it.
  (A file's mtime has the kernel's coarse clock: one written within a clock tick after a barrier counts as
  written before it.)
A rank's own removals and every other question about files stay the operating system's.
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_left
from pathlib import Path

JOURNAL = "removed.jsonl"


class PeerFiles:
    """One rank's barrier count, its removals journalled, and its view of the files its peers removed."""

    def __init__(self, mailbox: Path, rank: int):
        self.journal = mailbox / JOURNAL
        self.rank = rank
        self.barriers_ns: list[int] = []  # when this rank passed each barrier (time.time_ns)
        self._seen_size = -1
        self._removed: dict[str, list[tuple[int, int]]] = {}  # path -> peers' (written, removed) barrier counts

    def passed_barrier(self) -> None:
        """Note that this rank has just passed a barrier."""
        self.barriers_ns.append(time.time_ns())

    def removed(self, path: str, mtime_ns: int) -> None:
        """Journal this rank's removal of the regular file `path`, last written at `mtime_ns`, unless no peer
        could have seen it (written and removed between the same two barriers: a temporary file)."""
        written, removed = bisect_left(self.barriers_ns, mtime_ns), len(self.barriers_ns)
        if written == removed:
            return
        entry = {"path": os.path.abspath(path), "rank": self.rank, "written": written, "removed": removed}
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())  # one append: whole lines even with concurrent ranks
        finally:
            os.close(fd)

    def existed_for_us(self, path: str) -> bool:
        """Whether a peer wrote `path` (missing now) before the barrier this rank is to pass next and removed it
        after that barrier."""
        self._read_journal()
        entries = self._removed.get(os.path.abspath(path))
        passed = len(self.barriers_ns)
        return bool(entries) and any(written <= passed < removed for written, removed in entries)

    def _read_journal(self) -> None:
        """Read the journal again when it has grown (whole lines only: a peer may be appending)."""
        try:
            size = self.journal.stat().st_size
        except FileNotFoundError:
            return
        if size == self._seen_size:
            return
        data = self.journal.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        self._removed = {}
        for line in whole.decode().splitlines():
            entry = json.loads(line)
            if entry["rank"] != self.rank:
                self._removed.setdefault(entry["path"], []).append((entry["written"], entry["removed"]))
        self._seen_size = len(whole)


def install(mailbox: Path, rank: int) -> PeerFiles:
    """Count `torch.distributed.barrier` calls, journal removals and answer `os.path.exists` (module docstring)."""
    import stat

    import torch.distributed as dist

    mailbox.mkdir(parents=True, exist_ok=True)
    files = PeerFiles(mailbox, rank)
    barrier, remove, exists = dist.barrier, os.remove, os.path.exists

    def counted_barrier(*args, **kwargs):
        work = barrier(*args, **kwargs)
        files.passed_barrier()
        return work

    def journalled_remove(path, *, dir_fd=None):
        if dir_fd is not None or isinstance(path, int):
            return remove(path, dir_fd=dir_fd)
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        remove(path)
        if st is not None and stat.S_ISREG(st.st_mode):
            files.removed(os.fsdecode(path), st.st_mtime_ns)

    def peer_aware_exists(path) -> bool:
        if exists(path):
            return True
        return not isinstance(path, int) and files.existed_for_us(os.fsdecode(path))

    dist.barrier = dist.distributed_c10d.barrier = counted_barrier
    os.remove = os.unlink = journalled_remove
    os.path.exists = peer_aware_exists
    return files
