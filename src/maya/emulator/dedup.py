"""Equivalent ranks: which ranks of a job behave alike, so that one capture stands for many.

Ranks are grouped by pipeline stage, the one axis along which SPMD training scripts run different
code: the stages are read from rank 0's point-to-point traffic (the members of the process group its
sends and receives use, assumed evenly strided across the world, as Megatron-LM and DeviceMesh lay
them out). Without point-to-point traffic all ranks form one class. Every class is then checked by
capturing one more of its members and comparing call signatures; a member that differs from its
representative (rank 0 logging, say) splits the class.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .convert import K_ALLOC, K_ATTN, K_COLL, K_COPY, K_GEMM, K_LAUNCH, K_MEMSET, RankCapture


def signature(cap: RankCapture) -> str:
    """Hash of what a rank asks of its GPUs, independent of times, addresses and communicator ids."""
    r = cap.records[cap.records["kind"] != K_ALLOC]
    h = hashlib.sha256()
    names = [cap.apis.get(int(i), "") for i in r["api"]]
    h.update("\n".join(names).encode())
    a = r["a"].copy()
    kind = r["kind"]
    kernel_names = np.array([cap.kernels.get(int(k), "") if kd == K_LAUNCH else "" for k, kd in zip(a[:, 0], kind)])
    h.update("\n".join(kernel_names).encode())
    keep = np.zeros_like(a)
    keep[kind == K_LAUNCH, 1:6] = a[kind == K_LAUNCH, 1:6]
    for k in (K_GEMM, K_ATTN):
        keep[kind == k] = a[kind == k]
    keep[(kind == K_COPY) | (kind == K_MEMSET), :2] = a[(kind == K_COPY) | (kind == K_MEMSET), :2]
    coll = kind == K_COLL
    keep[coll, 1:4] = a[coll, 1:4]  # count, op, dtype (not the communicator, root or peer)
    keep[coll, 7] = a[coll, 7]
    h.update(kind.tobytes())
    h.update(keep.tobytes())
    return h.hexdigest()


def stage_classes(world_size: int, api_calls: pa.Table, communicators: pa.Table) -> dict[int, list[int]]:
    """Representative rank -> ranks it stands for, from rank 0's trace (tables of rank 0)."""
    p2p = api_calls.filter(pc.is_in(api_calls.column("collective_name"), pa.array(["send", "recv"])))
    comm_ids = set(p2p.column("comm_id").drop_null().to_pylist())
    groups = [row["ranks"] for row in communicators.to_pylist()
              if row["comm_id"] in comm_ids and row["ranks"] and len(row["ranks"]) > 1]
    if not groups:
        return {0: list(range(world_size))}
    stages = sorted(max(groups, key=len))
    stride = stages[1] - stages[0]
    if any(b - a != stride for a, b in zip(stages, stages[1:])) or stride <= 0:
        raise ValueError(f"pipeline group {stages} is not evenly strided: emulate every rank (--no-dedup)")
    classes: dict[int, list[int]] = {rep: [] for rep in stages}
    for rank in range(world_size):
        classes[stages[(rank // stride) % len(stages)]].append(rank)
    return classes
