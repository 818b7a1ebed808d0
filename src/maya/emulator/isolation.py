"""Rank isolation for torch.distributed: every rendezvous (env://, tcp://, file://) gets a store that
answers as if all peers had done what this rank does, so no rank ever waits for another.

- `set`/`get` keep this rank's values; a key only a peer would have set reads as a deterministic
  placeholder (e.g. the NCCL unique id rank 0 publishes);
- `add(key, n)` counts this rank's increment once per rank of the world (counters and store-based
  barriers reach their targets);
- `wait` succeeds at once; `check` (does a key exist now?) answers for the keys this rank set or read, so
  a key a peer sets only when it fails does not exist: NCCL's heartbeat monitor polls for `exception_dump`
  (a peer's collective timed out) and, told it was there, dumped its flight recorder and held the rank's
  exit for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (8 minutes; torch 2.7).

Gloo groups complete locally; object collectives go through `mailbox.py`.
"""

from __future__ import annotations

import hashlib
import os
import sys
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import torch.distributed as dist

from maya.core import settings

from .streaming_barrier import install as refuse_streaming_barriers

PLACEHOLDER_BYTES = 128  # the size of an ncclUniqueId, the most common value read from a peer
_stores: list = []  # C++ holds the stores; Python must keep their objects alive


class IsolatedStore(dist.Store):
    def __init__(self, world_size: int):
        super().__init__()
        self.world_size = world_size
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value) -> None:
        self.data[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key: str) -> bytes:
        if key not in self.data:
            seed = hashlib.sha256(key.encode()).digest()
            self.data[key] = (seed * (PLACEHOLDER_BYTES // len(seed) + 1))[:PLACEHOLDER_BYTES]
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount * self.world_size
        self.data[key] = str(value).encode()
        return value

    def compare_set(self, key: str, expected, desired) -> bytes:
        current = self.data.get(key)
        expected = expected if isinstance(expected, bytes) else str(expected).encode()
        if current is None and expected == b"" or current == expected:
            self.data[key] = desired if isinstance(desired, bytes) else str(desired).encode()
        return self.data.get(key, expected)

    def wait(self, keys, timeout: timedelta | None = None) -> None:
        return None

    def check(self, keys) -> bool:
        return all(key in self.data for key in keys)

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def num_keys(self) -> int:
        return len(self.data)


def _handler(url: str, timeout: timedelta | None = None, **kwargs):
    query = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    rank = int(query.get("rank", kwargs.get("rank", os.environ.get("RANK", 0))))
    world_size = int(query.get("world_size", kwargs.get("world_size", os.environ.get("WORLD_SIZE", 1))))
    for name, given, variable in (("rank", rank, "RANK"), ("world_size", world_size, "WORLD_SIZE")):
        if variable in os.environ and given != int(os.environ[variable]):
            raise ValueError(
                f"init_process_group({name}={given}): this emulated rank is {variable}={os.environ[variable]} "
                "of the job maya emulate runs; a script that numbers its ranks itself (mp.spawn's index on "
                "another node) must agree with the job's shape (--nnodes, --nproc-per-node)"
            )
    store = IsolatedStore(world_size)
    _stores.append(store)
    yield store, rank, world_size


def _announce_split_colors() -> None:
    """NCCL communicators split off for a new group learn their size from the group's ranks, which
    only Python knows: each color torch derives from a rank list is registered with the NCCL stub."""
    import ctypes

    import torch.distributed.distributed_c10d as c10d

    register = ctypes.CDLL(None).maya_nccl_register_color
    derive = c10d._process_group_color

    def color(ranks):
        value = derive(ranks)
        register(ctypes.c_int(value), ctypes.c_int(len(ranks)))
        return value

    c10d._process_group_color = color
    expect = ctypes.CDLL(None).maya_nccl_expect_split
    group_split = getattr(c10d.ProcessGroup, "split_group", None)  # torch >= 2.8
    if group_split is None:
        return

    def split_group(self, ranks, *args, **kwargs):
        expect(ctypes.c_int(len(ranks)))
        return group_split(self, ranks, *args, **kwargs)

    c10d.ProcessGroup.split_group = split_group
    nccl2 = getattr(c10d, "ProcessGroupNCCL2", None)
    if nccl2 is not None and hasattr(nccl2, "split"):
        backend_split = nccl2.split

        def split_backend(self, store, ranks, *args, **kwargs):
            expect(ctypes.c_int(len(ranks)))
            return backend_split(self, store, ranks, *args, **kwargs)

        nccl2.split = split_backend


def _gloo_without_peers() -> None:
    """A Gloo group connects to every peer when created; in isolation it is torch's FakeProcessGroup,
    whose collectives complete at once and leave buffers as they are (the rank's data stands in)."""
    import inspect

    from torch._C._distributed_c10d import FakeProcessGroup

    if "_backend_type" not in inspect.signature(dist.Backend.register_backend).parameters:
        _gloo_as_fake_before_2_8(FakeProcessGroup)
        return

    def create(opts, backend_options):
        return FakeProcessGroup._create_internal(opts.group_rank, opts.group_size, None)

    dist.Backend.register_backend(
        dist.Backend.GLOO,
        create,
        extended_api=True,
        devices=dist.Backend.backend_capability[dist.Backend.GLOO],
        _backend_type=dist.ProcessGroup.BackendType.GLOO,
    )


def _peerless_monitored_barrier() -> None:
    """Gloo's monitored barrier (`dist.monitored_barrier`; Lightning Fabric's `rank_zero_first` waits in one on a
    Gloo group of its own) returns at once on a peerless Gloo group, as that group's other collectives do;
    torch's FakeProcessGroup would refuse it. On any other group it is torch's."""
    import torch
    from torch._C._distributed_c10d import FakeProcessGroup

    monitored = dist.ProcessGroup.monitored_barrier
    cpu = torch.device("cpu")

    def monitored_barrier(self, *args, **kwargs):
        if cpu in self._device_types and isinstance(self._get_backend(cpu), FakeProcessGroup):
            return None
        return monitored(self, *args, **kwargs)

    dist.ProcessGroup.monitored_barrier = monitored_barrier


def _gloo_as_fake_before_2_8(fake) -> None:
    """torch < 2.8 cannot register another Gloo backend: its group constructor (which c10d checks
    with isinstance) is replaced by one making a FakeProcessGroup."""
    import torch.distributed.distributed_c10d as c10d

    class PeerlessGloo(fake):
        def __init__(self, store, rank: int, size: int, *args, **kwargs):
            super().__init__(rank, size)

        def _set_sequence_number_for_group(self) -> None:  # numbers only peers would compare
            pass

    c10d.ProcessGroupGloo = PeerlessGloo


def install() -> None:
    """Route every rendezvous scheme to an isolated store; announce communicator splits; make Gloo
    groups peerless (their monitored barriers too); make MosaicML Streaming's shared-memory barrier fail
    with local peers (streaming_barrier.py); exchange pickled objects through the launcher's mailbox."""
    handlers = sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers
    for scheme in ("env", "tcp", "file"):
        handlers[scheme] = _handler
    _announce_split_colors()
    _gloo_without_peers()
    _peerless_monitored_barrier()
    refuse_streaming_barriers()
    if settings.EMU_MAILBOX.get():
        from pathlib import Path

        from .mailbox import install as exchange_objects

        exchange_objects(Path(settings.EMU_MAILBOX.get()), int(os.environ.get("RANK", "0")))
