"""Turn one emulated rank's raw capture (binary call and op records, side files) into maya_trace_spec
tables."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from maya_trace_spec import RunWriter
from maya_trace_spec.vocabulary import NCCL_API_COLLECTIVES, classify_kernel

from .runner import MODULE_PREFIX

# must match maya_rec in native/maya_emu.h
RECORD_DTYPE = np.dtype([
    ("seq", "<i8"), ("tid", "<i8"), ("start_ns", "<i8"), ("dur_ns", "<i8"), ("stream", "<i8"),
    ("api", "<i4"), ("domain", "<i4"), ("status", "<i4"), ("device", "<i4"), ("kind", "<i4"), ("flags", "<i4"),
    ("a", "<i8", (8,)), ("op", "<i8"),
])
assert RECORD_DTYPE.itemsize == 136
# must match OpRecord in native/ops_observer.cpp
OP_RECORD_DTYPE = np.dtype([
    ("op_id", "<i8"), ("parent", "<i8"), ("t_ns", "<i8"), ("end_ns", "<i8"), ("seq_nr", "<i8"),
    ("iteration", "<i4"), ("name_id", "<i4"), ("inputs_id", "<i4"), ("kind", "i1"), ("scope", "i1"), ("flags", "<i2"),
])
assert OP_RECORD_DTYPE.itemsize == 56
OP_ENTER, OP_EXIT = 0, 1
SCOPE_BACKWARD_FUNCTION = 1  # at::RecordScope
OP_FLAG_AUTOGRAD_THREAD = 1

DOMAINS = np.array(["runtime", "driver", "cublas", "cublaslt", "cudnn", "nccl", "other"])
REPLAYED = json.dumps({"cuda_graph_replay": True})
DTYPES = np.array([None, "fp32", "fp16", "bf16", "fp64", "tf32", "int8", "int32", "fp8e4m3", "fp8e5m2", "int64",
                   "uint8"], dtype=object)
MEMCPY_KINDS = np.array(["HtoH", "HtoD", "DtoH", "DtoD", "default", "PtoP"], dtype=object)
NCCL_OPS = np.array(["sum", "prod", "max", "min", "avg"], dtype=object)
K_PLAIN, K_LAUNCH, K_GEMM, K_COPY, K_MEMSET, K_COLL, K_EVENT, K_ALLOC, K_SYNC, K_ATTN = range(10)
F_DATA_DEPENDENT, F_UNIMPLEMENTED, F_GRAPH_REPLAY = 1, 2, 4


@dataclass
class RankCapture:
    """What one rank process left in its capture directory."""
    records: np.ndarray
    apis: dict[int, str]
    kernels: dict[int, str]
    communicators: list[dict]
    peak_bytes: dict[int, int]
    status: dict
    ops: np.ndarray
    op_strings: dict[int, str]
    process_groups: dict[str, list[int]]

    @classmethod
    def load(cls, raw: Path) -> RankCapture:
        records = _binary(raw, "calls-*.bin", RECORD_DTYPE)
        records = records[np.argsort(records["seq"], kind="stable")]
        status_path = raw / "status.json"
        return cls(
            records=records,
            apis=_tsv(raw / "apis.tsv"),
            kernels=_tsv(raw / "kernels.tsv"),
            communicators=[json.loads(line) for line in _lines(raw / "nccl_comms.jsonl")],
            peak_bytes={int(k): int(v.split("\t")[0]) for k, v in _tsv(raw / "memory.tsv").items()},
            status=json.loads(status_path.read_text()) if status_path.exists()
            else {"status": "failed", "error": "the process ended without reporting (killed or crashed)"},
            ops=_op_records(raw),
            op_strings=_tsv(raw / "op_strings.tsv"),
            process_groups=json.loads(groups.read_text()) if (groups := raw / "process_groups.json").exists() else {},
        )

    @property
    def unimplemented(self) -> dict[str, int]:
        mask = (self.records["flags"] & F_UNIMPLEMENTED) != 0
        ids, counts = np.unique(self.records["api"][mask], return_counts=True)
        return {self.apis.get(int(i), f"api#{i}"): int(c) for i, c in zip(ids, counts)}


def _binary(raw: Path, pattern: str, dtype: np.dtype) -> np.ndarray:
    parts = sorted(raw.glob(pattern))
    return np.concatenate([np.fromfile(p, dtype=dtype) for p in parts]) if parts else np.empty(0, dtype)


def _op_records(raw: Path) -> np.ndarray:
    """The observer's op records with the thread id (from each `ops-<tid>.bin` file name) added."""
    parts = sorted(raw.glob("ops-*.bin"))
    records = [np.fromfile(p, dtype=OP_RECORD_DTYPE) for p in parts]
    tids = [np.full(len(r), int(p.stem.split("-")[1]), dtype=np.int64) for p, r in zip(parts, records)]
    out = np.empty(sum(map(len, records)), dtype=[*OP_RECORD_DTYPE.descr, ("tid", "<i8")])
    for name in OP_RECORD_DTYPE.names:
        out[name] = np.concatenate([r[name] for r in records]) if records else []
    out["tid"] = np.concatenate(tids) if tids else []
    return out


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
    attn_kernels, args = _attention(r, cap.kernels)
    for i in np.flatnonzero((kind == K_LAUNCH) & (a[:, 7] > 0)):
        args[i] = json.dumps({"elements": int(a[i, 7])})  # a library kernel's own size
    for i in np.flatnonzero(r["flags"] & F_GRAPH_REPLAY):  # device work a cudaGraphLaunch replayed
        args[i] = REPLAYED if args[i] is None else json.dumps({**json.loads(args[i]), "cuda_graph_replay": True})
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
        "collective_name": _strings(np.array([NCCL_API_COLLECTIVES.get(n, n) for n in names], dtype=object)[r["api"]], coll),
        "in_msg_nelems": _masked(a[:, 1], coll),
        "out_msg_nelems": _masked(a[:, 7], coll),
        "comm_dtype": _named(DTYPES, a[:, 3], coll),
        "root_rank": _masked(a[:, 4], coll & (a[:, 4] >= 0), pa.int32()),
        "peer_rank": _masked(a[:, 5], coll & (a[:, 5] >= 0), pa.int32()),
        "comm_seq": _masked(a[:, 6], coll),
        "event_id": _masked(a[:, 0], event | ((kind == K_SYNC) & (a[:, 0] >= 0))),
        "data_dependent": pa.array((r["flags"] & F_DATA_DEPENDENT) != 0),
        "args": pa.array(args, type=pa.string()),
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


@dataclass
class Ops:
    """The ops table of a rank and, by row: name, parent row, parsed input signature (`pg` names a
    collective's group); `index` maps op_id to row."""
    table: pa.Table
    names: list[str]
    parents: list[int | None]
    signatures: list[dict]
    index: dict[int, int]


def ops_table(cap: RankCapture) -> Ops:
    """Ops from the observer's enter/exit records, ordered by op_id (parents precede children, so
    module path, phase and backward/optimizer membership are inherited in one pass)."""
    r = cap.ops
    enters = np.sort(r[r["kind"] == OP_ENTER], order="op_id")
    exits = r[r["kind"] == OP_EXIT]
    ids = enters["op_id"]
    end = enters["end_ns"].copy()  # -1: the op's enter record was flushed before it ended
    found = np.searchsorted(ids, exits["op_id"])
    ok = (found < len(ids)) & (ids[np.minimum(found, len(ids) - 1)] == exits["op_id"]) if len(ids) else found < 0
    end[found[ok]] = exits["end_ns"][ok]
    strings = cap.op_strings
    parsed = {i: json.loads(v) for i, v in strings.items() if v.startswith("{")}
    names = [strings.get(int(i), f"op#{i}") for i in enters["name_id"]]
    signatures = [parsed.get(int(i), {}) for i in enters["inputs_id"]]
    index = {int(op_id): k for k, op_id in enumerate(ids)}
    parents = [index.get(int(p)) for p in enters["parent"]]
    module_path: list[str | None] = []
    phase: list[str] = []
    backward = np.zeros(len(ids), dtype=bool)
    optimizer = np.zeros(len(ids), dtype=bool)
    autograd_thread = (enters["flags"] & OP_FLAG_AUTOGRAD_THREAD) != 0
    for k, (name, parent) in enumerate(zip(names, parents)):
        backward[k] = (enters["scope"][k] == SCOPE_BACKWARD_FUNCTION or autograd_thread[k]
                       or name.startswith("autograd::engine::evaluate_function")
                       or (parent is not None and backward[parent]))
        optimizer[k] = (name.startswith(("Optimizer.step", "Optimizer.zero_grad"))
                        or (parent is not None and optimizer[parent]))
        phase.append("backward" if backward[k] else "optimizer" if optimizer[k] else "forward")
        module_path.append(name[len(MODULE_PREFIX):] if name.startswith(MODULE_PREFIX)
                           else module_path[parent] if parent is not None else None)
    table = pa.table({
        "op_id": pa.array(ids),
        "parent_op_id": pa.array([int(ids[p]) if p is not None else None for p in parents], pa.int64()),
        "name": pa.array(names, pa.string()),
        "thread_id": pa.array(enters["tid"]),
        "start_ns": pa.array(enters["t_ns"]),
        "end_ns": _masked(end, end >= 0),
        "time_source": pa.array(["emulated"] * len(ids), pa.string()),
        "input_shapes": pa.array([sig.get("s") for sig in signatures], pa.list_(pa.list_(pa.int64()))),
        "input_dtypes": pa.array([sig.get("t") for sig in signatures], pa.list_(pa.string())),
        "module_path": pa.array(module_path, pa.string()),
        "phase": pa.array(phase, pa.string()),
        "iteration": pa.array(enters["iteration"]),
        "seq_nr": _masked(enters["seq_nr"], enters["seq_nr"] >= 0),
    })
    return Ops(table, names, parents, signatures, index)


def _process_groups(ops: Ops, call_ops: np.ndarray, coll: np.ndarray, rank: int,
                    members: dict[str, list[int]]) -> tuple[list[str | None], dict[str, dict]]:
    """For each collective call, the process group of its enclosing `record_param_comms` op
    (`pg:NAME`, as the Kineto importer names them), and one communicators row per group. Members come
    from the process groups the runner listed; a group it did not list keeps the NCCL communicator."""
    groups: dict[str, dict] = {}
    out: list[str | None] = []
    for op_id, is_coll in zip(call_ops, coll):
        k = ops.index.get(int(op_id)) if is_coll and op_id >= 0 else None
        while k is not None and ops.names[k] != "record_param_comms":
            k = ops.parents[k]
        name = ops.signatures[k].get("pg") if k is not None else None
        ranks = members.get(name) if name is not None else None
        if not ranks:
            out.append(None)
            continue
        comm_id = f"pg:{name}"
        groups.setdefault(comm_id, {
            "comm_id": comm_id, "comm_rank": ranks.index(rank) if rank in ranks else 0, "comm_size": len(ranks),
            "pg_name": name, "pg_desc": None, "ranks": ranks,
        })
        out.append(comm_id)
    return out, groups


def write_rank(cap: RankCapture, writer: RunWriter, rank: int) -> None:
    """Write the per-rank tables of one emulated rank (all but `devices`, which the launcher writes
    once it knows which ranks the capture stands for)."""
    ops = ops_table(cap)
    op_of = np.array([o if o in ops.index else None for o in cap.records["op"].tolist()], dtype=object)
    alloc = cap.records["kind"] == K_ALLOC
    calls = api_calls_table(cap, list(op_of[~alloc]))
    coll = cap.records["kind"][~alloc] == K_COLL
    pg_ids, groups = _process_groups(ops, cap.records["op"][~alloc], coll, rank, cap.process_groups)
    comm_ids = [pg or old for pg, old in zip(pg_ids, calls.column("comm_id").to_pylist())]
    calls = calls.set_column(calls.schema.get_field_index("comm_id"), "comm_id", pa.array(comm_ids, pa.string()))
    writer.write("api_calls", calls, rank=rank)
    writer.write("memory_events", memory_events_table(cap, list(op_of[alloc])), rank=rank)
    if ops.table.num_rows:
        writer.write("ops", ops.table, rank=rank)
    if cap.kernels:
        writer.write("kernels", {
            "kernel_id": list(cap.kernels), "name": list(cap.kernels.values()),
            **{k: [classify_kernel(n)[k] for n in cap.kernels.values()] for k in ("family", "library")},
        }, rank=rank)
    used = set(comm_ids)
    native = [c for c in cap.communicators if c["comm_id"] in used]  # collectives outside any process group
    if groups or native:
        writer.write("communicators", pa.Table.from_pylist([*groups.values(), *native]), rank=rank)
