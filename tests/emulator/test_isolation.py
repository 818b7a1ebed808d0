"""The rendezvous store of an isolated rank (emulator/isolation.py): it answers as if every peer did what this
rank does, so no rank waits, and a key only a failing peer would set does not exist."""

from datetime import timedelta

import torch.distributed as dist

from maya.emulator.isolation import PLACEHOLDER_BYTES, IsolatedStore


def test_keys_a_peer_publishes_read_as_placeholders_and_counters_count_every_rank():
    store = IsolatedStore(world_size=4)
    assert len(store.get("nccl_unique_id")) == PLACEHOLDER_BYTES
    assert store.get("nccl_unique_id") == store.get("nccl_unique_id")
    assert store.add("barrier", 1) == 4
    store.wait(["a key no rank sets"], timedelta(seconds=1))  # returns at once


def test_check_finds_only_keys_this_rank_set_or_read():
    """c10d's NCCL heartbeat monitor polls `check(["exception_dump"])` through the group's PrefixStore: a peer
    sets it only when its collective timed out. Answered True, torch 2.7.1 dumped its flight recorder and held
    pipeline_gpt's exit for 8 minutes."""
    store = IsolatedStore(world_size=2)
    prefixed = dist.PrefixStore("default_pg", store)  # as c10d calls it, through C++
    assert not prefixed.check(["exception_dump"])
    prefixed.set("exception_dump", "1")
    assert prefixed.check(["exception_dump"])
    store.get("peer_key")
    assert store.check(["peer_key"]) and not store.check(["peer_key", "other"])
