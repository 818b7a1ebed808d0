"""Which ranks are simulated and how their communicators connect: deduplicated ranks are expanded
from their representatives, and every collective gets a key that all its members compute alike.

A captured rank `Y` whose `devices.represents` is `[Y, Y1, Y2, ...]` stands for those ranks: copy `j`
(rank `Yj`) replays `Y`'s program, each of its communicators mapped member by member:

- the members `Y` represents itself (its own copies in the group, e.g. a tensor- or data-parallel
  group of identical ranks) must sit at evenly strided positions `0, s, 2s, ...` (`n` of them) of
  `Y`'s list, as device-mesh groups do; copy `j`'s group is the same pattern in the block of `s * n`
  positions that holds `j`, with copy `j` in `Y`'s role;
- a member represented by another rank `Z` at position `i` of `Z`'s list moves as `Y`'s own members
  do: the lists of ranks that talk to each other are aligned (position `i` of every list holds the
  same model shard), so it becomes the rank at position `i` of `Z`'s list shifted by copy `j` digit
  by digit (positions read as a block index, a step among the `n`, an offset below `s`, each added
  modulo its range). Copy `j` of pipeline stage 0 sends to copy `j` of stage 1, and the members of a
  group spanning both (Megatron's tensor x pipeline group, `[0, 1, 4, 5]` of 8 ranks with TP=2, PP=2)
  follow the tensor-parallel copies of their own stage (rank 1's is `[0, 1, 4, 5]`, not `[0, 1, 5, 6]`).

A rank list ordered like the device mesh (e.g. data-parallel index major, tensor-parallel minor) thus
expands every group to the right ranks."""

from __future__ import annotations

from dataclasses import dataclass

from .program import Program
from .trace import TraceSet


class MissingRanks(ValueError):
    """Members of a communicator were neither captured nor represented."""


@dataclass(frozen=True)
class GlobalComm:
    comm_id: str
    members: tuple[int, ...]
    """Global ranks, sorted."""
    nodes: int


@dataclass
class Replica:
    """One simulated rank: a program replayed with its global ranks mapped."""

    rank: int
    program: Program
    captured: bool
    comms: list[int]
    """Per program communicator: index into the global communicator list (-1: not used)."""
    keys: list[tuple[tuple[tuple, int], ...]]
    """Per launch, per operation: (matching key, number of participants). Keys: `(communicator, seq)`
    for collectives, `(communicator, src, dst, order)` for p2p (global communicator index and ranks). A launch's
    keys are one object wherever they are equal (`expand`): the copies of a rank in one group, the two ends of a
    send."""


def expand(traces: TraceSet, programs: dict[int, Program]) -> tuple[list[Replica], list[GlobalComm]]:
    """Every simulated rank (captured or represented), sorted by rank, and the global communicators."""
    lists = {y: traces.ranks[y].represents for y in programs}
    position: dict[int, tuple[int, int]] = {}
    for y in sorted(programs):
        for i, x in enumerate(lists[y]):
            if x in position:
                raise ValueError(f"rank {x} is represented by both rank {position[x][0]} and rank {y}")
            position[x] = (y, i)
    inferred = _inferred_members(programs)
    comm_index: dict[tuple, int] = {}
    comms: list[GlobalComm] = []
    missing: dict[str, set[int]] = {}
    replicas = []
    launches: dict[tuple, tuple] = {}  # each launch's keys once: a 512-rank job holds ~10M of them otherwise
    for x, (y, j) in sorted(position.items()):
        program = programs[y]
        used = {op.comm for launch in program.launches for op in launch}
        local: list[int] = []
        members: dict[int, list[int]] = {}
        for c, comm in enumerate(program.communicators):
            if c not in used:
                local.append(-1)
                continue
            ranks = list(comm.ranks or inferred[comm.comm_id])
            mapped = members[c] = _map_group(ranks, y, j, position, lists)
            absent = {r for r in mapped if r not in position} | (
                {-1} if comm.ranks is None and len(ranks) < comm.size else set()
            )
            if absent:
                missing.setdefault(comm.comm_id, set()).update(absent)
            key = (comm.comm_id, tuple(sorted(set(mapped))))
            if key not in comm_index:
                comm_index[key] = len(comms)
                comms.append(GlobalComm(comm.comm_id, key[1], len({traces.node_of(r) for r in key[1]})))
            local.append(comm_index[key])
        replicas.append(Replica(x, program, j == 0, local, _keys(program, local, members, x, comms, launches)))
    if missing:
        raise MissingRanks(_missing_message(missing, programs, (traces.attrs.get("dedup") or {}).get("refused")))
    return replicas, comms


def _map_group(
    ranks: list[int], y: int, j: int, position: dict[int, tuple[int, int]], lists: dict[int, list[int]]
) -> list[int]:
    """The members (by communicator rank) of clone `j` of rank `y`'s group `ranks`."""
    listed = lists[y]
    own = [k for k, g in enumerate(ranks) if position.get(g, (None, 0))[0] == y]
    offsets = sorted(position[ranks[k]][1] for k in own)
    stride = offsets[1] - offsets[0] if len(offsets) > 1 else 1
    if not offsets or offsets != list(range(0, stride * len(offsets), stride)):
        raise ValueError(
            f"rank {y}: a communicator holds ranks it represents at positions {offsets} of its "
            "represents list: expected itself and an evenly strided set"
        )
    n = len(offsets)
    block = stride * n

    def shifted(i: int) -> int:
        """Position `i` moved by copy `j`: block, step and offset each added modulo its range."""
        base, step, offset = i // block, i // stride % n, i % stride
        return (base + j // block) * block + (step + j // stride % n) % n * stride + (offset + j % stride) % stride

    mapped = list(ranks)
    for k, g in enumerate(ranks):
        if g not in position:
            continue
        z, i = position[g]
        if z == y:  # its own copies: the block holding copy j, copy j in rank y's role
            i = shifted(i)
            if i >= len(listed):
                raise ValueError(f"rank {y}: {len(listed)} represented ranks do not fill blocks of {block}")
            mapped[k] = listed[i]
        else:
            mapped[k] = lists[z][shifted(i) % len(lists[z])]
    return mapped


def _keys(
    program: Program,
    local: list[int],
    members: dict[int, list[int]],
    rank: int,
    comms: list[GlobalComm],
    launches: dict[tuple, tuple],
) -> list[tuple[tuple[tuple, int], ...]]:
    """Matching key and participant count of every operation of every launch of `rank`: each launch's keys, and
    each send's or receive's, the object `launches` holds for them (added when new)."""
    out = []
    for launch in program.launches:
        keys = []
        for _, c, p2p, order, peer, send in launch:
            g = local[c]
            if not p2p:
                keys.append(((g, order), len(comms[g].members)))
                continue
            if not 0 <= peer < len(members[c]) or program.communicators[c].ranks is None:
                raise ValueError(
                    f"rank {program.rank}: p2p peer {peer} on communicator "
                    f"{program.communicators[c].comm_id!r} is not a listed member"
                )
            other = members[c][peer]
            key = ((g, rank, other, order) if send else (g, other, rank, order), 2)
            keys.append(launches.setdefault(key, key))  # the other end's too
        found = tuple(keys)
        out.append(launches.setdefault(found, found))
    return out


def _inferred_members(programs: dict[int, Program]) -> dict[str, list[int]]:
    """For communicators listed without ranks: the captured ranks that belong to them."""
    members: dict[str, list[int]] = {}
    for rank, program in sorted(programs.items()):
        for comm in program.communicators:
            members.setdefault(comm.comm_id, []).append(rank)
    return members


def _missing_message(missing: dict[str, set[int]], programs: dict[int, Program], refused: str | None) -> str:
    """Which members are missing, and why no capture stands for them when deduplication was `refused`."""
    parts = []
    for comm_id, ranks in sorted(missing.items()):
        named = sorted(r for r in ranks if r >= 0)
        parts.append(
            f"{comm_id}: rank(s) {', '.join(map(str, named))}"
            if named
            else f"{comm_id}: members not listed and not all captured"
        )
    return (
        "communicator member(s) neither captured nor represented by a captured rank — "
        + "; ".join(parts)
        + f" (captured: {', '.join(map(str, sorted(programs)))}); "
        "emulate those ranks too, or mark them in devices.represents"
        + (f" (deduplication refused: {refused})" if refused else "")
    )
