"""Turn one emulated rank's raw capture (binary call records, side files, Kineto ops) into
maya_trace_spec tables."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from maya_trace_spec import RunWriter
from maya_trace_spec.interop.kineto import classify_kernel, ops_enclosing

from .runner import MODULE_PREFIX

# must match maya_rec in native/maya_emu.h
RECORD_DTYPE = np.dtype([
    ("seq", "<i8"), ("tid", "<i8"), ("start_ns", "<i8"), ("dur_ns", "<i8"), ("stream", "<i8"),
    ("api", "<i4"), ("domain", "<i4"), ("status", "<i4"), ("device", "<i4"), ("kind", "<i4"), ("flags", "<i4"),
    ("a", "<i8", (8,)),
])
assert RECORD_DTYPE.itemsize == 128

DOMAINS = np.array(["runtime", "driver", "cublas", "cublaslt", "cudnn", "nccl", "other"])
DTYPES = np.array([None, "fp32", "fp16", "bf16", "fp64", "tf32", "int8", "int32", "fp8e4m3", "fp8e5m2", "int64",
                   "uint8"], dtype=object)
MEMCPY_KINDS = np.array(["HtoH", "HtoD", "DtoH", "DtoD", "default", "PtoP"], dtype=object)
NCCL_OPS = np.array(["sum", "prod", "max", "min", "avg"], dtype=object)
COLLECTIVES = {"ncclAllReduce": "allreduce", "ncclReduce": "reduce", "ncclBroadcast": "broadcast",
               "ncclAllGather": "allgather", "ncclReduceScatter": "reducescatter", "ncclAlltoAll": "alltoall",
               "ncclGather": "gather", "ncclScatter": "scatter", "ncclSend": "send", "ncclRecv": "recv"}
K_PLAIN, K_LAUNCH, K_GEMM, K_COPY, K_MEMSET, K_COLL, K_EVENT, K_ALLOC, K_SYNC, K_ATTN = range(10)
F_DATA_DEPENDENT, F_UNIMPLEMENTED = 1, 2


@dataclass
class RankCapture:
    """What one rank process left in its capture directory."""
    records: np.ndarray
    apis: dict[int, str]
    kernels: dict[int, str]
    communicators: list[dict]
    peak_bytes: dict[int, int]
    status: dict
    kineto: dict | None
    process_groups: dict[str, list[int]]

    @classmethod
    def load(cls, raw: Path) -> RankCapture:
        parts = sorted(raw.glob("calls-*.bin"))
        records = (np.concatenate([np.fromfile(p, dtype=RECORD_DTYPE) for p in parts])
                   if parts else np.empty(0, RECORD_DTYPE))
        records = records[np.argsort(records["seq"], kind="stable")]
        kineto_path = raw / "kineto.json"
        status_path = raw / "status.json"
        return cls(
            records=records,
            apis=_tsv(raw / "apis.tsv"),
            kernels=_tsv(raw / "kernels.tsv"),
            communicators=[json.loads(line) for line in _lines(raw / "nccl_comms.jsonl")],
            peak_bytes={int(k): int(v.split("\t")[0]) for k, v in _tsv(raw / "memory.tsv").items()},
            status=json.loads(status_path.read_text()) if status_path.exists()
            else {"status": "failed", "error": "the process ended without reporting (killed or crashed)"},
            kineto=json.loads(kineto_path.read_text()) if kineto_path.exists() else None,
            process_groups=json.loads(groups.read_text()) if (groups := raw / "process_groups.json").exists() else {},
        )

    @property
    def unimplemented(self) -> dict[str, int]:
        mask = (self.records["flags"] & F_UNIMPLEMENTED) != 0
        ids, counts = np.unique(self.records["api"][mask], return_counts=True)
        return {self.apis.get(int(i), f"api#{i}"): int(c) for i, c in zip(ids, counts)}


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line] if path.exists() else []


def _tsv(path: Path) -> dict[int, str]:
    out = {}
    for line in _lines(path):
        key, _, value = line.partition("\t")
        out[int(key)] = value
    return out


def _masked(values: np.ndarray, mask: np.ndarray, type_: pa.DataType = pa.int64()) -> pa.Array:
    return pa.array(values, type=type_, mask=~mask)


def _strings(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    out = values.astype(object)
    out[~mask] = None
    return pa.array(out, type=pa.string())


def _named(names: np.ndarray, codes: np.ndarray, mask: np.ndarray) -> pa.Array:
    """names[code] where `mask`, else null (codes of other rows may be anything)."""
    idx = np.where(mask & (codes >= 0) & (codes < len(names)), codes, 0)
    return _strings(names[idx], mask & (codes >= 0) & (codes < len(names)))


ATTENTION_KERNELS = ("cudnn_sdpa_fwd", "cudnn_sdpa_bwd")  # named by Maya: cuDNN hides its kernels


def _attention(r: np.ndarray, kernels: dict[int, str]) -> tuple[np.ndarray, list[str | None]]:
    """Kernel ids (added to `kernels`) and JSON args of the attention graphs cuDNN executed."""
    ids = np.zeros(len(r), dtype=np.int64)
    args: list[str | None] = [None] * len(r)
    for i in np.flatnonzero(r["kind"] == K_ATTN):
        a = r["a"][i]
        name = ATTENTION_KERNELS[int(a[5] >> 1) & 1]
        if name not in kernels.values():
            kernels[max(kernels, default=-1) + 1] = name
        ids[i] = next(k for k, v in kernels.items() if v == name)
        args[i] = json.dumps({"attention": {"batch": int(a[0]), "heads": int(a[1]), "seq_q": int(a[2]),
                                            "seq_kv": int(a[3]), "head_dim": int(a[4]), "causal": bool(a[5] & 1),
                                            "backward": bool(a[5] & 2), "dtype": DTYPES[a[6]] if 0 <= a[6] < len(DTYPES) else None,
                                            "kv_heads": int(a[7])}})
    return ids, args


def api_calls_table(cap: RankCapture, op_ids: list[int | None]) -> pa.Table:
    r = cap.records[cap.records["kind"] != K_ALLOC]
    a, kind = r["a"], r["kind"]
    attn_kernels, attn_args = _attention(r, cap.kernels)
    attn = kind == K_ATTN
    launch, gemm, copy, memset, coll, event = (kind == k for k in (K_LAUNCH, K_GEMM, K_COPY, K_MEMSET, K_COLL, K_EVENT))
    names = np.array([cap.apis.get(i, f"api#{i}") for i in range(max(cap.apis, default=-1) + 1)] or [""], dtype=object)
    sizes = np.where(copy | memset, a[:, 0], 0)
    stream_known = r["stream"] >= 0
    return pa.table({
        "seq": pa.array(np.arange(len(r), dtype=np.int64)),
        "thread_id": pa.array(r["tid"]),
        "api": pa.array(names[r["api"]], type=pa.string()),
        "domain": pa.array(DOMAINS[r["domain"]].astype(object), type=pa.string()),
        "status": pa.array(r["status"]),
        "start_ns": pa.array(r["start_ns"]),
        "duration_ns": pa.array(r["dur_ns"]),
        "time_source": pa.array(np.full(len(r), "emulated", dtype=object), type=pa.string()),
        "op_id": pa.array(op_ids, type=pa.int64()),
        "device": pa.array(r["device"]),
        "stream_id": _masked(r["stream"], stream_known),
        "kernel_id": _masked(np.where(attn, attn_kernels, a[:, 0]), launch | attn),
        "grid_x": _masked(a[:, 1] & 0xFFFFFFFF, launch, pa.int32()),
        "grid_y": _masked(a[:, 1] >> 32, launch, pa.int32()),
        "grid_z": _masked(a[:, 2], launch, pa.int32()),
        "block_x": _masked(a[:, 3] & 0xFFFFFFFF, launch, pa.int32()),
        "block_y": _masked(a[:, 3] >> 32, launch, pa.int32()),
        "block_z": _masked(a[:, 4], launch, pa.int32()),
        "shared_mem_bytes": _masked(a[:, 5], launch, pa.int32()),
        "gemm_m": _masked(a[:, 0], gemm),
        "gemm_n": _masked(a[:, 1], gemm),
        "gemm_k": _masked(a[:, 2], gemm),
        "gemm_batch": _masked(a[:, 3], gemm),
        "gemm_trans_a": _masked((a[:, 4] & 0xFF) != 0, gemm, pa.bool_()),
        "gemm_trans_b": _masked((a[:, 4] >> 8) != 0, gemm, pa.bool_()),
        "gemm_dtype_a": _named(DTYPES, a[:, 5] & 0xFFFF, gemm),
        "gemm_dtype_b": _named(DTYPES, (a[:, 5] >> 16) & 0xFFFF, gemm),
        "gemm_dtype_c": _named(DTYPES, (a[:, 5] >> 32) & 0xFFFF, gemm),
        "gemm_compute_type": _named(DTYPES, a[:, 6], gemm),
        "bytes": _masked(sizes, copy | memset),
        "memcpy_kind": _named(MEMCPY_KINDS, a[:, 1], copy),
        "comm_id": _strings(np.char.mod("%016x", a[:, 0].view(np.uint64)) if len(r) else np.array([], object), coll),
        "collective_name": _strings(np.array([COLLECTIVES.get(n, n) for n in names], dtype=object)[r["api"]], coll),
        "in_msg_nelems": _masked(a[:, 1], coll),
        "out_msg_nelems": _masked(a[:, 7], coll),
        "comm_dtype": _named(DTYPES, a[:, 3], coll),
        "root_rank": _masked(a[:, 4], coll & (a[:, 4] >= 0), pa.int32()),
        "peer_rank": _masked(a[:, 5], coll & (a[:, 5] >= 0), pa.int32()),
        "comm_seq": _masked(a[:, 6], coll),
        "event_id": _masked(a[:, 0], event | ((kind == K_SYNC) & (a[:, 0] >= 0))),
        "data_dependent": pa.array((r["flags"] & F_DATA_DEPENDENT) != 0),
        "args": pa.array(attn_args, type=pa.string()),
    })


def memory_events_table(cap: RankCapture, op_ids: list[int | None]) -> pa.Table:
    r = cap.records[cap.records["kind"] == K_ALLOC]
    a = r["a"]
    return pa.table({
        "seq": pa.array(np.arange(len(r), dtype=np.int64)),
        "ts_ns": pa.array(r["start_ns"]),
        "kind": pa.array(np.array(["alloc", "free", "oom"], dtype=object)[np.clip(a[:, 3], 0, 2)], type=pa.string()),
        "space": pa.array(np.array(["device", "host"], dtype=object)[np.clip(a[:, 4], 0, 1)], type=pa.string()),
        "address": pa.array(a[:, 0]),
        "bytes": pa.array(a[:, 1]),
        "device": pa.array(r["device"]),
        "stream_id": _masked(r["stream"], r["stream"] >= 0),
        "allocated_bytes": pa.array(a[:, 2]),
        "op_id": pa.array(op_ids, type=pa.int64()),
    })


def _with_module_paths(ops: list[dict]) -> list[dict]:
    """Each op's module_path: the innermost enclosing `nn.Module: PATH` range."""
    by_id = {o["op_id"]: o for o in ops}
    for o in ops:  # parents precede children
        parent = by_id.get(o["parent_op_id"])
        inherited = parent["module_path"] if parent else None
        o["module_path"] = o["name"][len(MODULE_PREFIX):] if o["name"].startswith(MODULE_PREFIX) else inherited
    return ops


def _process_groups(ops: list[dict], op_args: list[dict], call_ops: np.ndarray, coll: np.ndarray,
                    rank: int, world_size: int, members: dict[str, list[int]]
                    ) -> tuple[list[str | None], dict[str, dict]]:
    """For each collective call, the process group of its enclosing `record_param_comms` op
    (`pg:NAME`, as the Kineto importer names them), and one communicators row per group. Group
    members come from the process groups the runner listed (`members`), else from the op's args."""
    parent = {o["op_id"]: o["parent_op_id"] for o in ops}
    groups: dict[str, dict] = {}
    out: list[str | None] = []
    for op_id, is_coll in zip(call_ops, coll):
        while is_coll and op_id is not None and ops[op_id]["name"] != "record_param_comms":
            op_id = parent[op_id]
        if not is_coll or op_id is None:
            out.append(None)
            continue
        args = op_args[op_id]
        name = str(args.get("Process Group Name"))
        ranks = members.get(name) or _listed_ranks(args)
        size = len(ranks) if ranks else int(args.get("Group size") or world_size)
        if not ranks and size == world_size:
            ranks = list(range(world_size))
        comm_id = f"pg:{name}"
        groups.setdefault(comm_id, {
            "comm_id": comm_id, "comm_rank": ranks.index(rank) if rank in ranks else 0, "comm_size": size,
            "pg_name": name, "pg_desc": args.get("Process Group Description"), "ranks": ranks or None,
        })
        out.append(comm_id)
    return out, groups


def _listed_ranks(args: dict) -> list[int]:
    try:
        return [int(x) for x in json.loads(str(args.get("Process Group Ranks", "[]")))]
    except ValueError:
        return []


def write_rank(cap: RankCapture, writer: RunWriter, rank: int, world_size: int) -> None:
    """Write the per-rank tables of one emulated rank (all but `devices`, which the launcher writes
    once it knows which ranks the capture stands for)."""
    pid = cap.status.get("pid")
    points = [(pid, int(t), int(s)) for t, s in zip(cap.records["tid"], cap.records["start_ns"])]
    if cap.kineto is not None:
        ops, op_of, op_args = ops_enclosing("kineto.json", cap.kineto, points)
    else:
        ops, op_of, op_args = [], [None] * len(points), []
    alloc = cap.records["kind"] == K_ALLOC
    op_of = np.array(op_of, dtype=object)
    calls = api_calls_table(cap, list(op_of[~alloc]))
    coll = cap.records["kind"][~alloc] == K_COLL
    pg_ids, groups = _process_groups(ops, op_args, op_of[~alloc], coll, rank, world_size, cap.process_groups)
    comm_ids = [pg or old for pg, old in zip(pg_ids, calls.column("comm_id").to_pylist())]
    calls = calls.set_column(calls.schema.get_field_index("comm_id"), "comm_id", pa.array(comm_ids, pa.string()))
    writer.write("api_calls", calls, rank=rank)
    writer.write("memory_events", memory_events_table(cap, list(op_of[alloc])), rank=rank)
    if ops:
        writer.write("ops", pa.Table.from_pylist(_with_module_paths(ops)), rank=rank)
    if cap.kernels:
        writer.write("kernels", {
            "kernel_id": list(cap.kernels), "name": list(cap.kernels.values()),
            **{k: [classify_kernel(n)[k] for n in cap.kernels.values()] for k in ("family", "library")},
        }, rank=rank)
    used = set(comm_ids)
    native = [c for c in cap.communicators if c["comm_id"] in used]  # collectives outside any process group
    if groups or native:
        writer.write("communicators", pa.Table.from_pylist([*groups.values(), *native]), rank=rank)
