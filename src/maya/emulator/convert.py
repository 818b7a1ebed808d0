"""Turn one emulated rank's raw capture (binary call and op records, side files) into maya_trace_spec
tables, streamed: memory stays bounded whatever the capture's size.

Calls: every thread appends its records to its own `calls-<tid>.bin` in `seq` order, so the files
are merged chunk by chunk (a window of at most `CHUNK_RECORDS` read from each) and written as parts of
`PART_ROWS` rows. Ops: each thread's `ops-<tid>.bin` is read in chunks with the
stack of that thread's open ops (an op's parent is the innermost op open on its thread when it
starts), which carries module path, phase and process group down to children. What is held besides
a chunk: the open ops, ops whose end is still to come, the process group of collective ops, and one
bit per op id (whether the op is in the table).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from maya_trace_spec import RunWriter, conform
from maya_trace_spec.vocabulary import EVAL_RANGE, NCCL_API_COLLECTIVES, classify_kernel

from .capture_format import (
    ATTENTION_KERNELS,
    DOMAINS,
    DTYPES,
    F_DATA_DEPENDENT,
    F_GRAPH_REPLAY,
    F_UNIMPLEMENTED,
    K_ALLOC,
    K_ATTN,
    K_COLL,
    K_COPY,
    K_EVENT,
    K_GEMM,
    K_LAUNCH,
    K_MEMSET,
    K_SYNC,
    MEMCPY_KINDS,
    MODULE_PREFIX,
    NOTES_FILE,
    OP_ENTER,
    OP_EXIT,
    OP_FLAG_AUTOGRAD_THREAD,
    OP_RECORD_DTYPE,
    RECORD_DTYPE,
    SCOPE_BACKWARD_FUNCTION,
    STAND_INS,
)

CHUNK_RECORDS = 1 << 16
"""Records read at a time from each capture file (9 MiB of calls)."""
PART_ROWS = 1 << 18
"""Rows per written part of a table (one Parquet row group)."""


# ------------------------------------------------------------------ side files


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line] if path.exists() else []


def _tsv(path: Path) -> dict[int, str]:
    out = {}
    for line in _lines(path):
        key, _, value = line.partition("\t")
        out[int(key)] = value
    return out


def read_launch_notes(raw: Path) -> dict[int, dict]:
    """The runner's descriptions of Triton launches by id (triton_launches.py), without their id."""
    notes = {}
    for line in _lines(raw / NOTES_FILE):
        entry = json.loads(line)
        notes[int(entry.pop("id"))] = entry
    return notes


def read_status(raw: Path) -> dict:
    path = raw / "status.json"
    return (
        json.loads(path.read_text())
        if path.exists()
        else {"status": "failed", "error": "the process ended without reporting (killed or crashed)"}
    )


# ------------------------------------------------------------------ call records, merged by seq


def _records(path: Path, dtype: np.dtype) -> int:
    """Whole records in a binary file (a record cut short by a kill is dropped)."""
    return path.stat().st_size // dtype.itemsize


def _read(path: Path, dtype: np.dtype, start: int, count: int) -> np.ndarray:
    return np.fromfile(path, dtype=dtype, count=count, offset=start * dtype.itemsize)


def merged_records(raw: Path) -> Iterator[np.ndarray]:
    """The rank's call records in `seq` order, in chunks: each step takes from every thread's file the
    records up to the smallest last `seq` among the windows of CHUNK_RECORDS read from them."""
    chunk = CHUNK_RECORDS
    paths = [p for p in sorted(raw.glob("calls-*.bin")) if _records(p, RECORD_DTYPE)]
    sizes = [_records(p, RECORD_DTYPE) for p in paths]
    read = [0] * len(paths)  # records read from each file so far
    windows = [np.empty(0, RECORD_DTYPE) for _ in paths]
    while True:
        for i, path in enumerate(paths):  # top the windows up
            if len(windows[i]) < chunk and read[i] < sizes[i]:
                more = _read(path, RECORD_DTYPE, read[i], min(chunk - len(windows[i]), sizes[i] - read[i]))
                read[i] += len(more)
                windows[i] = np.concatenate([windows[i], more])
                if len(windows[i]) > 1 and not (np.diff(windows[i]["seq"]) > 0).all():
                    raise ValueError(f"{path}: call records out of order; the capture is corrupt")
        live = [i for i in range(len(paths)) if len(windows[i])]
        if not live:
            return
        bound = min(int(windows[i]["seq"][-1]) for i in live)
        parts = []
        for i in live:
            end = int(np.searchsorted(windows[i]["seq"], bound, side="right"))
            parts.append(windows[i][:end])
            windows[i] = windows[i][end:].copy()
        out = np.concatenate(parts)
        yield out[np.argsort(out["seq"], kind="stable")]


@dataclass
class RankSummary:
    """What `maya emulate` reports about one rank, from one pass over its calls."""

    status: dict
    calls: int
    peak_bytes: int  # the most device memory allocated at once (what `maya predict` reports)
    unimplemented: dict[str, int]

    @classmethod
    def scan(cls, raw: Path) -> RankSummary:
        apis = _tsv(raw / "apis.tsv")
        calls, peak = 0, 0
        unimplemented: Counter[str] = Counter()
        for r in merged_records(raw):
            alloc = r["kind"] == K_ALLOC
            calls += int((~alloc).sum())
            device = alloc & (r["a"][:, 4] == 0)
            if device.any():
                peak = max(peak, int(r["a"][device, 2].max()))
            ids, counts = np.unique(r["api"][(r["flags"] & F_UNIMPLEMENTED) != 0], return_counts=True)
            unimplemented.update({apis.get(int(i), f"api#{i}"): int(c) for i, c in zip(ids, counts)})
        return cls(read_status(raw), calls, peak, dict(unimplemented))


POLLS = frozenset({"cudaEventQuery", "cudaStreamQuery", "cuEventQuery", "cuStreamQuery"})


def signature(raw: Path) -> str:
    """Hash of what a rank asks of its GPUs, independent of times, addresses and communicator ids. Polls
    (`cudaEventQuery`, `cudaStreamQuery`) ask nothing of them and are left out: a watchdog thread polls once a
    second, so how many a capture holds depends on how long it ran (native/completion.c)."""
    apis, kernels = _tsv(raw / "apis.tsv"), _tsv(raw / "kernels.tsv")
    polls = np.array([i for i, name in apis.items() if name in POLLS], dtype=np.int64)
    names, kernel_names, kinds, payload = (hashlib.sha256() for _ in range(4))
    for r in merged_records(raw):
        r = r[(r["kind"] != K_ALLOC) & ~np.isin(r["api"], polls)]
        a, kind = r["a"], r["kind"]
        names.update("".join(apis.get(int(i), "") + "\n" for i in r["api"]).encode())
        kernel_names.update(
            "".join((kernels.get(int(k), "") if kd == K_LAUNCH else "") + "\n" for k, kd in zip(a[:, 0], kind)).encode()
        )
        keep = np.zeros_like(a)
        keep[kind == K_LAUNCH, 1:6] = a[kind == K_LAUNCH, 1:6]
        for k in (K_GEMM, K_ATTN):
            keep[kind == k] = a[kind == k]
        copies = (kind == K_COPY) | (kind == K_MEMSET)
        keep[copies, :2] = a[copies, :2]
        coll = kind == K_COLL
        keep[coll, 1:4] = a[coll, 1:4]  # count, op, dtype (not the communicator, root or peer)
        keep[coll, 7] = a[coll, 7]
        kinds.update(kind.astype("<i4").tobytes())
        payload.update(keep.astype("<i8").tobytes())
    return hashlib.sha256(b"".join(h.digest() for h in (names, kernel_names, kinds, payload))).hexdigest()


# ------------------------------------------------------------------ ops


class _Bits:
    """A growable set of small non-negative integers (op ids), one bit each."""

    def __init__(self):
        self.bits = np.zeros(1 << 16, dtype=np.uint8)

    def add(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        need = int(ids.max()) // 8 + 1
        if need > len(self.bits):
            self.bits = np.concatenate([self.bits, np.zeros(max(need, 2 * len(self.bits)) - len(self.bits), np.uint8)])
        np.bitwise_or.at(self.bits, ids >> 3, (1 << (ids & 7)).astype(np.uint8))

    def contains(self, ids: np.ndarray) -> np.ndarray:
        inside = (ids >= 0) & (ids < 8 * len(self.bits))
        safe = np.where(inside, ids, 0)
        return inside & (((self.bits[safe >> 3] >> (safe & 7)) & 1) == 1)


class _Parts:
    """Rows of one per-rank table, written as parts of about PART_ROWS rows."""

    def __init__(self, writer: RunWriter, name: str, rank: int):
        self.writer, self.name, self.rank = writer, name, rank
        self.tables: list[pa.Table] = []
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.rows += table.num_rows
        if self.rows >= PART_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.tables:
            self.writer.write(self.name, pa.concat_tables(self.tables), rank=self.rank)
        self.tables, self.rows = [], 0


@dataclass
class _NoOps:
    """No framework ops: the calls of a capture still being written, out of their op context."""

    known: _Bits
    pg_of: dict[int, str]
    peer_of: dict[int, int] = field(default_factory=dict)


def call_rows(raw: Path, records: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """`api_calls` rows of some call records of a capture still being written (the device-time oracle's view:
    no op context, collectives on their NCCL communicators) and the `kernels` dictionary they refer to."""
    calls = _CallsPass(raw, 0, _NoOps(_Bits(), {}), {})
    table = calls._calls(records)
    names = list(calls.kernels.values())
    kernels = {
        "kernel_id": list(calls.kernels),
        "name": names,
        **{k: [classify_kernel(n)[k] for n in names] for k in ("family", "library")},
    }
    return conform("api_calls", table), conform("kernels", kernels)


OP_COLUMNS = (
    "op_id",
    "parent_op_id",
    "name",
    "thread_id",
    "start_ns",
    "end_ns",
    "input_shapes",
    "input_dtypes",
    "module_path",
    "phase",
    "iteration",
    "seq_nr",
)


P2P_TITLE = re.compile(r"nccl:(?:send \d+->|recv \d+<-)(?P<peer>\d+)")
"""The range torch's NCCL process group opens around an unbatched send or receive: `nccl:send 0->2`, `nccl:recv
2<-0`, ranks in the process group's numbering."""


class _OpsPass:
    """Streams the ops of every thread into the `ops` table; keeps which op ids exist, the process group
    (`pg:NAME` of its enclosing `record_param_comms`) of every op inside a collective, and the peer (in that
    group's numbering) of every unbatched send or receive range (`P2P_TITLE`)."""

    def __init__(self, raw: Path, parts: _Parts):
        self.strings = _tsv(raw / "op_strings.tsv")
        self.signatures: dict[int, dict] = {}
        self.known = _Bits()
        self.pg_of: dict[int, str] = {}
        self.peer_of: dict[int, int] = {}
        self.parts = parts
        self.rows: dict[str, list] = {c: [] for c in OP_COLUMNS}
        for path in sorted(raw.glob("ops-*.bin")):
            self._thread(path, int(path.stem.split("-")[1]))
        self._flush()

    def _signature(self, inputs_id: int) -> dict:
        sig = self.signatures.get(inputs_id)
        if sig is None:
            text = self.strings.get(inputs_id, "")
            sig = self.signatures[inputs_id] = json.loads(text) if text.startswith("{") else {}
        return sig

    def _emit(self, row: tuple) -> None:
        for column, value in zip(OP_COLUMNS, row):
            self.rows[column].append(value)
        if len(self.rows["op_id"]) >= CHUNK_RECORDS:  # Python rows are large: into Arrow early
            self._flush()

    def _flush(self) -> None:
        rows = self.rows
        if not rows["op_id"]:
            return
        self.parts.add(
            pa.table(
                {
                    "op_id": pa.array(rows["op_id"], pa.int64()),
                    "parent_op_id": pa.array(rows["parent_op_id"], pa.int64()),
                    "name": pa.array(rows["name"], pa.string()),
                    "thread_id": pa.array(rows["thread_id"], pa.int64()),
                    "start_ns": pa.array(rows["start_ns"], pa.int64()),
                    "end_ns": pa.array(rows["end_ns"], pa.int64()),
                    "time_source": pa.array(["emulated"] * len(rows["op_id"]), pa.string()),
                    "input_shapes": pa.array(rows["input_shapes"], pa.list_(pa.list_(pa.int64()))),
                    "input_dtypes": pa.array(rows["input_dtypes"], pa.list_(pa.string())),
                    "module_path": pa.array(rows["module_path"], pa.string()),
                    "phase": pa.array(rows["phase"], pa.string()),
                    "iteration": pa.array(rows["iteration"], pa.int32()),
                    "seq_nr": pa.array(rows["seq_nr"], pa.int64()),
                }
            )
        )
        self.rows = {c: [] for c in OP_COLUMNS}

    def _thread(self, path: Path, tid: int) -> None:
        # open ops of the thread, innermost last: (op_id, module path, backward, optimizer, eval, pg)
        stack: list[tuple[int, str | None, bool, bool, bool, str | None]] = []
        pending: dict[int, tuple] = {}  # rows whose op ends in a later EXIT record
        for start in range(0, _records(path, OP_RECORD_DTYPE), CHUNK_RECORDS):
            chunk = _read(path, OP_RECORD_DTYPE, start, CHUNK_RECORDS)
            self.known.add(chunk["op_id"][chunk["kind"] == OP_ENTER])
            for rec in chunk.tolist():
                op_id, parent, t_ns, end_ns, seq_nr, iteration, name_id, inputs_id, kind, scope, flags = rec
                if kind == OP_EXIT:
                    row = pending.pop(op_id, None)
                    if row is not None:
                        self._emit(row[:5] + (end_ns,) + row[6:])
                    continue
                while stack and stack[-1][0] != parent:
                    stack.pop()
                up = stack[-1] if stack else None
                name = self.strings.get(name_id, f"op#{name_id}")
                sig = self._signature(inputs_id) if inputs_id >= 0 else {}
                backward = (
                    scope == SCOPE_BACKWARD_FUNCTION
                    or bool(flags & OP_FLAG_AUTOGRAD_THREAD)
                    or name.startswith("autograd::engine::evaluate_function")
                    or (up is not None and up[2])
                )
                optimizer = name.startswith(("Optimizer.step", "Optimizer.zero_grad")) or (up is not None and up[3])
                evaluating = name == EVAL_RANGE or (up is not None and up[4])
                module = (
                    name[len(MODULE_PREFIX) :] if name.startswith(MODULE_PREFIX) else up[1] if up is not None else None
                )
                pg = sig.get("pg") if name == "record_param_comms" else up[5] if up is not None else None
                if pg is not None:
                    self.pg_of[op_id] = pg
                if p2p := P2P_TITLE.fullmatch(name):
                    self.peer_of[op_id] = int(p2p["peer"])
                stack.append((op_id, module, backward, optimizer, evaluating, pg))
                phase = "backward" if backward else "optimizer" if optimizer else "eval" if evaluating else "forward"
                row = (
                    op_id,
                    up[0] if up is not None else None,
                    name,
                    tid,
                    t_ns,
                    end_ns if end_ns >= 0 else None,
                    sig.get("s"),
                    sig.get("t"),
                    module,
                    phase,
                    iteration,
                    seq_nr if seq_nr >= 0 else None,
                )
                if end_ns >= 0:
                    self._emit(row)
                else:
                    pending[op_id] = row
        for row in pending.values():  # never ended (the process stopped inside them)
            self._emit(row)


# ------------------------------------------------------------------ calls


def _masked(values: np.ndarray, mask: np.ndarray, type_: pa.DataType = pa.int64()) -> pa.Array:
    return pa.array(values, type=type_, mask=~mask)


def _strings(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    out = values.astype(object)
    out[~mask] = None
    return pa.array(out, type=pa.string())


def _named(names: np.ndarray, codes: np.ndarray, mask: np.ndarray) -> pa.Array:
    """names[code] where `mask`, else null (codes of other rows may be anything)."""
    ok = mask & (codes >= 0) & (codes < len(names))
    return _strings(names[np.where(ok, codes, 0)], ok)


class _CallsPass:
    """Streams the merged call records into `api_calls` and `memory_events` (`write`); `_calls` turns records into
    `api_calls` rows."""

    def __init__(self, raw: Path, rank: int, ops: _OpsPass | _NoOps, members: dict[str, list[int]]):
        self.apis = _tsv(raw / "apis.tsv")
        self.kernels = _tsv(raw / "kernels.tsv")
        self.launch_notes = read_launch_notes(raw)
        self.rank, self.ops, self.members = rank, ops, members
        self.groups: dict[str, dict] = {}
        self.used_comms: set[str] = set()
        names = [self.apis.get(i, f"api#{i}") for i in range(max(self.apis, default=-1) + 1)] or [""]
        self.api_names = np.array(names, dtype=object)
        self.collective_names = np.array([NCCL_API_COLLECTIVES.get(n, n) for n in names], dtype=object)
        self.next_call = self.next_event = 0

    def write(self, raw: Path, writer: RunWriter) -> None:
        calls, memory = _Parts(writer, "api_calls", self.rank), _Parts(writer, "memory_events", self.rank)
        for r in merged_records(raw):
            alloc = r["kind"] == K_ALLOC
            calls.add(self._calls(r[~alloc]))
            memory.add(self._memory(r[alloc]))
        calls.flush()
        memory.flush()

    def _op_ids(self, ops: np.ndarray) -> pa.Array:
        return _masked(ops, self.ops.known.contains(ops))

    def _kernel_id(self, name: str) -> int:
        for k, v in self.kernels.items():
            if v == name:
                return k
        k = max(self.kernels, default=-1) + 1
        self.kernels[k] = name
        return k

    def _args(self, r: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
        """Kernel ids of the attention graphs cuDNN executed and the JSON args of every call."""
        a, kind = r["a"], r["kind"]
        ids = np.zeros(len(r), dtype=np.int64)
        args: list[dict | None] = [None] * len(r)
        for i in np.flatnonzero(kind == K_ATTN):
            x = a[i]
            ids[i] = self._kernel_id(ATTENTION_KERNELS[int(x[5] >> 1) & 1])
            args[i] = {
                "attention": {
                    "batch": int(x[0]),
                    "heads": int(x[1]),
                    "seq_q": int(x[2]),
                    "seq_kv": int(x[3]),
                    "head_dim": int(x[4]),
                    "causal": bool(x[5] & 1),
                    "backward": bool(x[5] & 2),
                    "dtype": DTYPES[x[6]] if 0 <= x[6] < len(DTYPES) else None,
                    "kv_heads": int(x[7]),
                }
            }
        for i in np.flatnonzero((kind == K_LAUNCH) & (a[:, 7] > 0)):
            args[i] = {"elements": int(a[i, 7])}  # a library kernel's own size
        for i in np.flatnonzero((kind == K_LAUNCH) & (a[:, 6] > 0)):
            note = self.launch_notes.get(int(a[i, 6]))
            if note is not None and note["kernel"] == self.kernels.get(int(a[i, 0])):  # Triton's arguments
                args[i] = {"triton": {k: v for k, v in note.items() if k != "kernel"}}
        for i in np.flatnonzero((kind == K_EVENT) & (a[:, 1] == 1)):  # an event timing the oracle answered
            args[i] = {"device_time_ns": int(a[i, 2])}
        for i in np.flatnonzero((kind == K_COPY) & (a[:, 3] > 0)):
            args[i] = {"stand_in": STAND_INS.get(int(a[i, 3]), "other")}
        for i in np.flatnonzero(r["flags"] & F_GRAPH_REPLAY):  # device work a cudaGraphLaunch replayed
            args[i] = {**(args[i] or {}), "cuda_graph_replay": True}
        return ids, [json.dumps(x) if x is not None else None for x in args]

    def _comm_ids(self, r: np.ndarray, coll: np.ndarray) -> tuple[list[str | None], np.ndarray]:
        """For each collective, the process group of its enclosing `record_param_comms` op (`pg:NAME`, as
        the Kineto importer names them) where the runner listed that group's members, else the NCCL
        communicator's id; and each call's peer (send/recv) in that numbering. NCCL's peer is a rank of the
        communicator the call used, which for an unbatched send or receive of torch's legacy process group
        is a 2-rank communicator of the pair (peer 0 or 1), so a call labelled with its group takes the peer
        its `nccl:send`/`nccl:recv` range names."""
        native = np.char.mod("%016x", r["a"][:, 0].view(np.uint64)) if len(r) else np.array([], object)
        out: list[str | None] = [None] * len(r)
        peers = r["a"][:, 5].copy()
        for i in np.flatnonzero(coll):
            name = self.ops.pg_of.get(int(r["op"][i]))
            ranks = self.members.get(name) if name is not None else None
            if not ranks:
                out[i] = str(native[i])
            else:
                out[i] = f"pg:{name}"
                if peers[i] >= 0:
                    peers[i] = self.ops.peer_of.get(int(r["op"][i]), peers[i])
                self.groups.setdefault(
                    out[i],
                    {
                        "comm_id": out[i],
                        "comm_rank": ranks.index(self.rank) if self.rank in ranks else 0,
                        "comm_size": len(ranks),
                        "pg_name": name,
                        "pg_desc": None,
                        "ranks": ranks,
                    },
                )
            self.used_comms.add(out[i])
        return out, peers

    @staticmethod
    def _domains(r: np.ndarray) -> np.ndarray:
        """Each call's library; work a `cudaGraphLaunch` replayed is `device`: no host call of its own issued it (the
        launch did), so it costs the host nothing."""
        domains = DOMAINS[r["domain"]].astype(object)
        domains[(r["flags"] & F_GRAPH_REPLAY) != 0] = "device"
        return domains

    def _calls(self, r: np.ndarray) -> pa.Table:
        a, kind = r["a"], r["kind"]
        attn_kernels, args = self._args(r)
        launch, gemm, copy, memset, coll, event = (
            kind == k for k in (K_LAUNCH, K_GEMM, K_COPY, K_MEMSET, K_COLL, K_EVENT)
        )
        attn = kind == K_ATTN
        seq = np.arange(self.next_call, self.next_call + len(r), dtype=np.int64)
        self.next_call += len(r)
        api = np.clip(r["api"], 0, len(self.api_names) - 1)
        comm_ids, peers = self._comm_ids(r, coll)
        return pa.table(
            {
                "seq": pa.array(seq),
                "thread_id": pa.array(r["tid"]),
                "api": pa.array(self.api_names[api], type=pa.string()),
                "domain": pa.array(self._domains(r), type=pa.string()),
                "status": pa.array(r["status"]),
                "start_ns": pa.array(r["start_ns"]),
                "duration_ns": pa.array(r["dur_ns"]),
                "cpu_start_ns": _masked(r["cpu_ns"], r["cpu_ns"] >= 0),
                "cpu_duration_ns": _masked(r["cpu_dur_ns"], r["cpu_ns"] >= 0),
                "time_source": pa.array(np.full(len(r), "emulated", dtype=object), type=pa.string()),
                "op_id": self._op_ids(r["op"]),
                "device": pa.array(r["device"]),
                "stream_id": _masked(r["stream"], r["stream"] >= 0),
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
                "bytes": _masked(np.where(copy | memset, a[:, 0], 0), copy | memset),
                "memcpy_kind": _named(MEMCPY_KINDS, a[:, 1], copy),
                "comm_id": pa.array(comm_ids, pa.string()),
                "collective_name": _strings(self.collective_names[api], coll),
                "in_msg_nelems": _masked(a[:, 1], coll),
                "out_msg_nelems": _masked(a[:, 7], coll),
                "comm_dtype": _named(DTYPES, a[:, 3], coll),
                "root_rank": _masked(a[:, 4], coll & (a[:, 4] >= 0), pa.int32()),
                "peer_rank": _masked(peers, coll & (peers >= 0), pa.int32()),
                "comm_seq": _masked(a[:, 6], coll),
                "event_id": _masked(a[:, 0], event | ((kind == K_SYNC) & (a[:, 0] >= 0))),
                "data_dependent": pa.array((r["flags"] & F_DATA_DEPENDENT) != 0),
                "args": pa.array(args, type=pa.string()),
            }
        )

    def _memory(self, r: np.ndarray) -> pa.Table:
        a = r["a"]
        seq = np.arange(self.next_event, self.next_event + len(r), dtype=np.int64)
        self.next_event += len(r)
        return pa.table(
            {
                "seq": pa.array(seq),
                "ts_ns": pa.array(r["start_ns"]),
                "kind": pa.array(
                    np.array(["alloc", "free", "oom"], dtype=object)[np.clip(a[:, 3], 0, 2)], type=pa.string()
                ),
                "space": pa.array(np.array(["device", "host"], dtype=object)[np.clip(a[:, 4], 0, 1)], type=pa.string()),
                "address": pa.array(a[:, 0]),
                "bytes": pa.array(a[:, 1]),
                "device": pa.array(r["device"]),
                "stream_id": _masked(r["stream"], r["stream"] >= 0),
                "allocated_bytes": pa.array(a[:, 2]),
                "op_id": self._op_ids(r["op"]),
            }
        )


def write_rank(raw: Path, writer: RunWriter, rank: int) -> None:
    """Write the per-rank tables of one emulated rank from its capture directory (all but `devices`,
    which the launcher writes once it knows which ranks the capture stands for)."""
    groups_path = raw / "process_groups.json"
    members = json.loads(groups_path.read_text()) if groups_path.exists() else {}
    ops_parts = _Parts(writer, "ops", rank)
    ops = _OpsPass(raw, ops_parts)
    ops_parts.flush()
    calls = _CallsPass(raw, rank, ops, members)
    calls.write(raw, writer)
    if calls.kernels:
        names = list(calls.kernels.values())
        writer.write(
            "kernels",
            {
                "kernel_id": list(calls.kernels),
                "name": names,
                **{k: [classify_kernel(n)[k] for n in names] for k in ("family", "library")},
            },
            rank=rank,
        )
    communicators = [json.loads(line) for line in _lines(raw / "nccl_comms.jsonl")]
    native = [c for c in communicators if c["comm_id"] in calls.used_comms]  # collectives outside any group
    if calls.groups or native:
        writer.write("communicators", pa.Table.from_pylist([*calls.groups.values(), *native]), rank=rank)
