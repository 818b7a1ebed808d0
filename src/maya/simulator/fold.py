"""Ranks that replay alike, replayed once.

A deduplicated job expands a few captured programs to many simulated ranks (512 for a 512-GPU FSDP row), most
of them with the same program and the same priced device times. The replay is a max-plus function of each
rank's program, durations and the collectives that join it to its peers, so two ranks with the same program and
durations whose every collective gathers the same kinds of peers at the same positions of their programs have
the same times, call by call. `fold` finds the coarsest such partition (colour refinement: start from
(program, device times) and split a class while its members' collectives see differently coloured peers) and
gives each class's representative its collectives' keys in the quotient: a collective's key is the set of
(class, local communicator) its communicator gathers with its sequence number, a point-to-point operation's the
set of (class, launch, operation) of its two ends. The engine then replays one rank per class, and every rank of a
class gets its representative's times: the same numbers a replay of every rank gives, not an approximation.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .topology import GlobalComm, Replica

Key = tuple[tuple, int]


@dataclass(frozen=True)
class Folding:
    """Classes of replicas that replay alike."""

    classes: list[int]
    """Per replica, its class."""
    representatives: list[int]
    """Per class, the replica replayed for it (its first)."""
    keys: list[list[list[Key]]]
    """Per class, its representative's (matching key, participants) per launch and operation in the quotient."""


def fold(replicas: list[Replica], devices: list[np.ndarray], comms: list[GlobalComm]) -> Folding | None:
    """The classes of `replicas` (with `devices[i]` the device times of replica i) that replay alike, or None when
    no two replicas do or a collective's participants are not what its key says (the full replay reports it)."""
    n = len(replicas)
    first: dict[tuple, int] = {}
    content = _contents(devices)
    color = [first.setdefault((id(r.program), content[id(d)]), len(first)) for r, d in zip(replicas, devices)]
    if len(first) == n:
        return None
    slot = {r.rank: i for i, r in enumerate(replicas)}
    locals_of: list[dict[int, list[int]]] = []
    members: dict[int, list[int]] = defaultdict(list)
    p2p: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    sends: dict[int, bool] = {}  # per program: whether it has p2p operations (most have none: no key to scan)
    for i, replica in enumerate(replicas):
        local: dict[int, list[int]] = defaultdict(list)
        for c, g in enumerate(replica.comms):
            if g >= 0:
                local[g].append(c)
        for g in local:
            members[g].append(i)
        locals_of.append(local)
        program = replica.program
        if id(program) not in sends:
            sends[id(program)] = any(op.p2p for launch in program.launches for op in launch)
        if not sends[id(program)]:
            continue
        for L, launch_keys in enumerate(replica.keys):
            for j, (key, _) in enumerate(launch_keys):
                if len(key) != 2:
                    p2p[key].append((i, L, j))
    if any(sorted(slot.get(rank, -1) for rank in comms[g].members) != sorted(ranks) for g, ranks in members.items()):
        return None
    if any(len(ends) != 2 for ends in p2p.values()):
        return None
    peer_of: list[list[tuple[int, int, int, int, int]]] = [[] for _ in range(n)]  # (own L, j, peer, its L, j)
    for ends in p2p.values():
        for i, L, j in ends:
            peer_of[i].extend((L, j, *other) for other in ends if other != (i, L, j))
    count = len(first)
    while True:
        seen = _comm_signatures(members, locals_of, color)
        signatures: dict[tuple, int] = {}
        refined = [
            signatures.setdefault(
                (
                    color[i],
                    tuple(seen[g] if g >= 0 else None for g in replicas[i].comms),
                    tuple(sorted((L, j, color[o], oL, oj) for L, j, o, oL, oj in peer_of[i])),
                ),
                len(signatures),
            )
            for i in range(n)
        ]
        color = refined
        if len(signatures) == count:
            break
        count = len(signatures)
    if count == n:
        return None
    seen = _comm_signatures(members, locals_of, color)
    representatives = [0] * count
    for i in range(n - 1, -1, -1):
        representatives[color[i]] = i
    interned: dict[tuple, int] = {}
    keys = []
    for i in representatives:
        quotient = []
        for launch_keys in replicas[i].keys:
            row = []
            for key, _ in launch_keys:
                if len(key) == 2:  # a collective (communicator, seq)
                    meets = seen[key[0]]
                    row.append(((interned.setdefault((meets, key[1]), len(interned)),), len(meets)))
                else:
                    meets = frozenset((color[o], L, j) for o, L, j in p2p[key])
                    row.append(((interned.setdefault((meets,), len(interned)),), len(meets)))
            quotient.append(row)
        keys.append(quotient)
    return Folding(color, representatives, keys)


def _contents(devices: list[np.ndarray]) -> dict[int, int]:
    """Per distinct device array (by identity): the index of the first array with the same times (copies priced
    for other layouts often price alike)."""
    found: dict[int, int] = {}
    by_digest: dict[bytes, list[np.ndarray]] = defaultdict(list)
    for d in devices:
        if id(d) in found:
            continue
        alike = by_digest[hashlib.blake2b(np.ascontiguousarray(d).data, digest_size=16).digest()]
        same = next((k for k, other in enumerate(alike) if np.array_equal(other, d)), None)
        if same is None:
            alike.append(d)
            same = len(alike) - 1
        found[id(d)] = id(alike[same])
    return found


def _comm_signatures(
    members: dict[int, list[int]], locals_of: list[dict[int, list[int]]], color: list[int]
) -> dict[int, frozenset]:
    """Per global communicator: the (class, local communicator index) of its members."""
    return {g: frozenset((color[i], c) for i in ranks for c in locals_of[i][g]) for g, ranks in members.items()}
