"""Import torch.profiler (Kineto) Chrome-trace JSON files into a maya_trace_spec run directory.

One file per rank, plain or gzip-compressed::

    import_kineto(["rank0.json.gz", "rank1.json.gz"], "runs/imported", hardware="h100-sxm")

Times are absolute and never rebased. Kineto writes ``ts``/``dur`` in microseconds with three
decimals, ``ts`` relative to the file's ``baseTimeNanoseconds`` (older files: Unix-epoch
microseconds and no base). Every time becomes ``baseTimeNanoseconds + round(ts * 1000)``, computed
in exact decimal arithmetic: Unix-epoch nanoseconds, one axis for all ranks.

Mapping, per rank:

* ``cpu_op`` and ``user_annotation`` slices -> ``ops``. Parents by time nesting on the same
  thread. ``phase``: backward on an autograd thread or under ``autograd::engine::evaluate_function``,
  optimizer under ``Optimizer.step``/``Optimizer.zero_grad``, forward elsewhere within a
  ``ProfilerStep#N``, other outside. ``iteration``: the N of the ``ProfilerStep#N`` (on any
  thread) spanning the op's start.
* ``cuda_runtime``/``cuda_driver`` slices -> ``api_calls``; their op is the one whose External id
  they carry, else the innermost op enclosing them on their thread.
* ``kernel``/``gpu_memcpy``/``gpu_memset`` slices are joined to their call by correlation id.
  Device work whose call is not in the trace (or that is not the first work of its call, as in a
  graph launch) gets a row of its own: api ``kernel``/``memcpy``/``memset``, domain ``device``.
* The collective args of NCCL kernels and of their enclosing ``record_param_comms`` op fill the
  collective columns; each process group becomes a ``communicators`` row, ``comm_id`` being
  ``pg:<Process Group Name>``.
* ``[memory]``/``[OutOfMemory]`` instant events -> ``memory_events`` (host and device).

Everything else (flows, metadata, ``python_function``, ``gpu_user_annotation``, ...) is ignored.
All inputs are parsed and converted in memory first; the run is then written to a hidden sibling
directory and renamed into place, so bad input never creates or changes the output directory.
Needs only the standard library and pyarrow.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import time
import uuid
import zlib
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..columns import SPEC_VERSION
from ..errors import TraceError
from ..schema import file_schema
from ..vocabulary import classify_kernel
from ..writer import RunWriter

__all__ = ["KinetoFormatError", "import_kineto"]

OP_CATEGORIES = ("cpu_op", "user_annotation")
CALL_DOMAINS = {"cuda_runtime": "runtime", "cuda_driver": "driver"}
DEVICE_APIS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
MEMORY_EVENTS = ("[memory]", "[OutOfMemory]")
NCCL_KERNEL_PREFIXES = ("ncclDevKernel_", "ncclKernel_")
MEMCPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")

_STEP_RE = re.compile(r"ProfilerStep#(\d+)")
_MEMCPY_RE = re.compile(r"Memcpy (\w+)")


class KinetoFormatError(TraceError):
    """A file that is not a usable Kineto/Chrome trace."""


# ---------------------------------------------------------------- public entry point


def import_kineto(
    files: Sequence[str | Path],
    out_dir: str | Path,
    *,
    ranks: Sequence[int] | None = None,
    hardware: str | None = None,
    command: Sequence[str] | None = None,
    framework: str | None = None,
) -> Path:
    """Convert one Kineto trace per rank into the run directory `out_dir` and return its path.

    A rank is taken from the file's ``distributedInfo.rank``, else from `ranks`, else from the
    file's position. `hardware` is the hardware catalog name recorded for the run and its devices;
    `command` and `framework` (e.g. ``torch 2.15.0``) are recorded when the producer knows them.
    Raises `KinetoFormatError` for unusable input and `FileExistsError` if `out_dir` is not empty.
    """
    paths = [Path(f) for f in files]
    out_dir = Path(out_dir)
    if not paths:
        raise ValueError("no Kineto trace files given")
    if ranks is not None and len(ranks) != len(paths):
        raise ValueError(f"{len(ranks)} ranks given for {len(paths)} files")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"{out_dir}: output exists and is not an empty directory")

    docs = [_load(p) for p in paths]
    by_rank: dict[int, tuple[Path, dict]] = {}
    world_sizes = []
    for i, (path, doc) in enumerate(zip(paths, docs)):
        info = doc.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        rank = _int(info.get("rank"), 0, INT32_MAX - 1)  # world_size = rank + 1 is an int32 too
        if rank is None:
            rank = ranks[i] if ranks is not None else i
            if _int(rank, 0, INT32_MAX - 1) is None:
                raise ValueError(f"rank {rank!r} of {path} is not a non-negative integer")
        if rank in by_rank:
            raise KinetoFormatError(path, f"rank {rank} is also the rank of {by_rank[rank][0]}")
        by_rank[rank] = (path, doc)
        if (ws := _int32(info.get("world_size"), 1)) is not None:
            world_sizes.append(ws)
    world_size = max(world_sizes, default=max(by_rank) + 1)
    for rank, (path, _) in by_rank.items():
        if rank >= world_size:
            raise KinetoFormatError(path, f"rank {rank} is not below world_size {world_size}")

    tables = {rank: _convert(path, doc, rank, hardware) for rank, (path, doc) in sorted(by_rank.items())}
    run = {
        "run_id": uuid.uuid4().hex,
        "created_at_ns": time.time_ns(),
        "source": "kineto-import",
        "status": "complete",
        "command": None if command is None else json.dumps(list(command)),
        "hardware": hardware,
        "world_size": world_size,
        "framework": framework or _framework(docs),
        "cuda_version": _cuda_version(docs),
        "producer_version": f"maya_trace_spec {SPEC_VERSION}",
        "attrs": json.dumps(
            {
                "source_files": [
                    {"path": str(path), "rank": rank, "metadata": {k: v for k, v in doc.items() if k != "traceEvents"}}
                    for rank, (path, doc) in sorted(by_rank.items())
                ]
            },
            default=float,
        ),
    }
    _write(out_dir, run, tables)
    return out_dir


# ---------------------------------------------------------------- reading and checking files


def _load(path: Path) -> dict:
    """The parsed, shape-checked trace of `path`; floats are parsed as exact `Decimal`s."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KinetoFormatError(path, "no such file") from None
    except OSError as e:
        raise KinetoFormatError(path, f"cannot be read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise KinetoFormatError(path, f"damaged gzip data: {e}") from None
    try:
        doc = json.loads(data, parse_float=Decimal)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise KinetoFormatError(path, f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise KinetoFormatError(path, "not a Kineto/Chrome trace: no traceEvents list")
    for i, event in enumerate(doc["traceEvents"]):
        if not isinstance(event, dict):
            raise KinetoFormatError(path, f"traceEvents[{i}] is not an object")
        for key in ("ph", "name"):
            if key not in event:
                raise KinetoFormatError(path, f"traceEvents[{i}] has no {key!r}")
        if not isinstance(event["ph"], str):
            raise KinetoFormatError(path, f"traceEvents[{i}] has a ph that is not a string: {event['ph']!r:.80}")
        for key in ("ts", "dur"):
            if key in event and not _is_number(event[key]):
                raise KinetoFormatError(path, f"traceEvents[{i}] has a non-numeric {key}: {event[key]!r:.80}")
            if key in event and abs(event[key]) > MAX_US:
                raise KinetoFormatError(
                    path, f"traceEvents[{i}] has a {key} of {event[key]} us, outside the int64 nanosecond range"
                )
    return doc


def _is_number(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, Decimal) and v.is_finite())


INT64_MAX, INT32_MAX = 2**63 - 1, 2**31 - 1
MAX_US = Decimal(9 * 10**15)
"""Largest |ts| or dur, in microseconds, whose nanoseconds (plus a base time) still fit an int64."""


def _int(v: Any, minimum: int | None = None, maximum: int = INT64_MAX) -> int | None:
    """`v` if it is an integer (not a bool) of at least `minimum` (default: the int64 range) and at most
    `maximum`, else None: a value that does not fit its column is not recorded."""
    if (
        isinstance(v, int)
        and not isinstance(v, bool)
        and (-maximum if minimum is None else minimum) <= v
        and v <= maximum
    ):
        return v
    return None


def _int32(v: Any, minimum: int | None = None) -> int | None:
    return _int(v, minimum, INT32_MAX)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _us_to_ns(v: int | Decimal) -> int:
    return int((v * 1000).to_integral_value()) if isinstance(v, Decimal) else v * 1000


# ---------------------------------------------------------------- converting one rank


@dataclass(eq=False)
class _Event:
    """A timed event of the trace; for ops `op` is the parent, for other events the owning op."""

    name: str
    cat: str | None
    thread: tuple[Any, Any]  # (pid, tid) as written
    start: int
    dur: int | None
    args: dict
    op: _Event | None = None
    op_id: int | None = None
    backward: bool = False
    optimizer: bool = False

    @property
    def end(self) -> int:
        return self.start + (self.dur or 0)


def _event(path: Path, i: int, e: dict, base_ns: int) -> _Event:
    if "ts" not in e:
        raise KinetoFormatError(path, f"traceEvents[{i}] ({e['name']!r:.80}) has no ts")
    dur = _us_to_ns(e["dur"]) if "dur" in e else None
    dur = dur if dur is None or dur >= 0 else None
    start = base_ns + _us_to_ns(e["ts"])
    if not -INT64_MAX <= start <= INT64_MAX - (dur or 0):
        raise KinetoFormatError(
            path,
            f"traceEvents[{i}] ({e['name']!r:.80}) starts or ends outside the int64 "
            "nanosecond range (baseTimeNanoseconds + ts)",
        )
    args = e.get("args")
    return _Event(
        str(e["name"]),
        _category(e),
        (_thread_key(e.get("pid")), _thread_key(e.get("tid"))),
        start,
        dur,
        args if isinstance(args, dict) else {},
    )


def _category(e: dict) -> str | None:
    cat = e.get("cat")
    return cat if isinstance(cat, str) else None


def _thread_key(v: Any) -> int | str | None:
    """A pid or tid as written when it is an integer or a string (anything else says nothing)."""
    return v if isinstance(v, str) or _int(v) is not None else None


def _convert(path: Path, doc: dict, rank: int, hardware: str | None) -> dict[str, list[dict]]:
    """The rows of every per-rank table for the trace `doc` of `rank`."""
    base_ns = _int(doc.get("baseTimeNanoseconds"), 0) or 0
    ops: list[_Event] = []
    calls: list[_Event] = []
    work: list[_Event] = []
    memory: list[_Event] = []
    thread_names: dict[tuple[Any, Any], str] = {}
    for i, e in enumerate(doc["traceEvents"]):
        ph, cat, name = e["ph"], _category(e), e["name"]
        if ph == "X" and cat in OP_CATEGORIES:
            ops.append(_event(path, i, e, base_ns))
        elif ph == "X" and cat in CALL_DOMAINS:
            calls.append(_event(path, i, e, base_ns))
        elif ph == "X" and cat in DEVICE_APIS:
            work.append(_event(path, i, e, base_ns))
        elif ph == "i" and name in MEMORY_EVENTS:
            memory.append(_event(path, i, e, base_ns))
        elif ph == "M" and name == "thread_name" and isinstance(e.get("args"), dict):
            thread_names[(_thread_key(e.get("pid")), _thread_key(e.get("tid")))] = str(e["args"].get("name", ""))

    ops.sort(key=lambda o: (o.start, -o.end))  # stable: file order breaks ties, as in _nest
    for op_id, o in enumerate(ops):
        o.op_id = op_id
    _nest(ops, calls + memory)
    by_external_id: dict[int, _Event] = {}
    for o in ops:
        if (ext := _int(o.args.get("External id"))) is not None:
            by_external_id.setdefault(ext, o)
    for c in calls:
        c.op = by_external_id.get(_int(c.args.get("External id")), c.op)
    for w in work:
        w.op = by_external_id.get(_int(w.args.get("External id")))

    autograd_threads = {t for t, name in thread_names.items() if "autograd" in name}
    api_calls, kernel_ids = _api_calls(calls, work)
    comms = _communicators(rank, ops, work, doc.get("distributedInfo"))
    for row in api_calls:
        if row.get("comm_id") not in comms:
            row["comm_id"] = None
    return {
        "devices": [_device(doc, ops, work, hardware)],
        "ops": _ops(ops, autograd_threads),
        "api_calls": api_calls,
        "kernels": [
            {"kernel_id": k, "name": name, "demangled": name, **classify_kernel(name)} for name, k in kernel_ids.items()
        ],
        "communicators": list(comms.values()),
        "memory_events": _memory_events(memory),
    }


def _nest(ops: list[_Event], points: list[_Event]) -> None:
    """Set each op's parent and each point event's innermost enclosing op, by time per thread.

    `ops` must be sorted by (start, -end). An op encloses what starts in [start, end) and, for an
    op, also ends by its end: Kineto ranges can overlap without nesting (a `ProfilerStep#N` opened
    from inside an optimizer-step hook outlives the `Optimizer.step` range).
    """
    by_thread: dict[tuple[Any, Any], list[tuple[int, int, int, _Event]]] = defaultdict(list)
    for o in ops:
        by_thread[o.thread].append((o.start, 0, -o.end, o))
    for p in points:
        by_thread[p.thread].append((p.start, 1, 0, p))
    for items in by_thread.values():
        items.sort(key=lambda item: item[:3])
        stack: list[_Event] = []
        for start, is_point, _, ev in items:
            stack = [f for f in stack if f.end > start]
            end = start if is_point else ev.end
            ev.op = next((f for f in reversed(stack) if f.end >= end), None)
            if not is_point:
                stack.append(ev)


def _thread_id(thread: tuple[Any, Any]) -> int | None:
    """The tid as an integer; a string tid is hashed stably to a non-negative int64."""
    tid = thread[1]
    if isinstance(tid, str):
        return int.from_bytes(hashlib.blake2b(tid.encode(), digest_size=7).digest(), "big")
    return _int(tid)


def _ops(ops: list[_Event], autograd_threads: set[tuple[Any, Any]]) -> list[dict]:
    steps = sorted((o.start, o.end, int(m.group(1))) for o in ops if (m := _STEP_RE.fullmatch(o.name)))
    step_starts = [s for s, _, _ in steps]

    def iteration(t: int) -> int | None:
        k = bisect_right(step_starts, t) - 1
        return steps[k][2] if k >= 0 and t < steps[k][1] else None

    rows = []
    for o in ops:  # parents come before their children
        parent = o.op
        o.backward = (
            o.name.startswith("autograd::engine::evaluate_function")
            or o.thread in autograd_threads
            or (parent is not None and parent.backward)
        )
        o.optimizer = o.name.startswith(("Optimizer.step", "Optimizer.zero_grad")) or (
            parent is not None and parent.optimizer
        )
        step = iteration(o.start)
        phase = (
            "backward"
            if o.backward
            else "optimizer"
            if o.optimizer
            else "forward"
            if step is not None and not _STEP_RE.fullmatch(o.name)
            else "other"
        )
        rows.append(
            {
                "op_id": o.op_id,
                "parent_op_id": parent.op_id if parent else None,
                "name": o.name,
                "thread_id": _thread_id(o.thread),
                "start_ns": o.start,
                "end_ns": o.end if o.dur is not None else None,
                "time_source": "measured",
                "input_shapes": _shapes(o.args.get("Input Dims")),
                "input_dtypes": _dtypes(o.args.get("Input type")),
                "phase": phase,
                "iteration": step,
                "seq_nr": _int(o.args.get("Sequence number")),
            }
        )
    return rows


def _shapes(dims: Any) -> list[list[int]] | None:
    """Kineto "Input Dims": one shape per input; inputs that are not one tensor get []."""
    if not isinstance(dims, list):
        return None
    return [d if isinstance(d, list) and all(_int(x) is not None for x in d) else [] for d in dims]


def _dtypes(types: Any) -> list[str | None] | None:
    return [_str(t) for t in types] if isinstance(types, list) else None


def _api_calls(calls: list[_Event], work: list[_Event]) -> tuple[list[dict], dict[str, int]]:
    """api_calls rows (ordered by start, with seq) and the kernel-name -> kernel_id dictionary."""
    by_correlation: dict[int, dict] = {}
    rows = []
    for c in calls:
        corr = _int(c.args.get("correlation"))
        row = {
            "thread_id": _thread_id(c.thread),
            "api": c.name,
            "domain": CALL_DOMAINS[c.cat],
            "start_ns": c.start,
            "duration_ns": c.dur,
            "correlation_id": corr,
            "_op": c.op,
        }
        rows.append(row)
        if corr is not None:
            by_correlation.setdefault(corr, row)
    kernel_ids: dict[str, int] = {}
    for w in sorted(work, key=lambda w: w.start):
        corr = _int(w.args.get("correlation"))
        row = by_correlation.pop(corr, None)
        if row is None:  # no call of its own in the trace, or not the call's first work
            row = {
                "api": DEVICE_APIS[w.cat],
                "domain": "device",
                "start_ns": w.start,
                "correlation_id": corr,
                "_op": w.op,
            }
            rows.append(row)
        row.update(_work_fields(w, kernel_ids))
        if w.cat == "kernel" and w.name.startswith(NCCL_KERNEL_PREFIXES):
            row.update(_collective_fields({**_comms_op_args(row["_op"]), **w.args}))
    rows.sort(key=lambda r: r["start_ns"])
    for seq, row in enumerate(rows):
        op = row.pop("_op")
        row.update(seq=seq, time_source="measured", op_id=op.op_id if op else None)
    return rows, kernel_ids


def _work_fields(w: _Event, kernel_ids: dict[str, int]) -> dict:
    a = w.args
    fields = {
        "device": _int32(a.get("device"), 0),
        "stream_id": _int(a.get("stream")),
        "device_start_ns": w.start,
        "device_duration_ns": w.dur,
    }
    if w.cat == "kernel":
        fields["kernel_id"] = kernel_ids.setdefault(w.name, len(kernel_ids))
        for key in ("grid", "block"):
            dims = a.get(key)
            dims = dims if isinstance(dims, list) and len(dims) == 3 else [None] * 3
            fields.update({f"{key}_{axis}": _int32(d, 0) for axis, d in zip("xyz", dims)})
        fields["shared_mem_bytes"] = _int32(a.get("shared memory"), 0)
        fields["registers_per_thread"] = _int32(a.get("registers per thread"), 0)
    else:
        fields["bytes"] = _int(a.get("bytes"), 0)
        if w.cat == "gpu_memcpy":
            m = _MEMCPY_RE.match(w.name)
            fields["memcpy_kind"] = m.group(1) if m and m.group(1) in MEMCPY_KINDS else None
    return fields


def _comms_op_args(op: _Event | None) -> dict:
    """Args of the nearest op at or above `op` that describes a collective (record_param_comms)."""
    while op is not None and "Collective name" not in op.args:
        op = op.op
    return op.args if op is not None else {}


def _collective_fields(a: dict) -> dict:
    name = _str(a.get("Collective name"))
    pg = a.get("Process Group Name")
    peer_key = "Dst Rank" if name and "send" in name else "Src Rank" if name and "recv" in name else None
    return {
        "collective_name": name,
        "comm_id": f"pg:{pg}" if isinstance(pg, (str, int)) else None,
        "in_msg_nelems": _int(a.get("In msg nelems"), 0),
        "out_msg_nelems": _int(a.get("Out msg nelems"), 0),
        "comm_dtype": _str(a.get("dtype")),
        "comm_seq": _int(a.get("Seq", a.get("seq")), 0),
        "peer_rank": _int32(a.get(peer_key), 0) if peer_key else None,
    }


def _communicators(rank: int, ops: list[_Event], work: list[_Event], dist_info: Any) -> dict[str, dict]:
    """One row per process group seen in collective args (or listed in distributedInfo.pg_config)."""
    sources = [o.args for o in ops] + [w.args for w in work if w.cat == "kernel"]
    pg_config = dist_info.get("pg_config") if isinstance(dist_info, dict) else None
    for pg in pg_config if isinstance(pg_config, list) else []:
        if isinstance(pg, dict):
            sources.append(
                {
                    "Process Group Name": pg.get("pg_name"),
                    "Process Group Description": pg.get("pg_desc"),
                    "Process Group Ranks": pg.get("ranks"),
                    "Group size": pg.get("pg_size"),
                }
            )
    found: dict[str, dict] = {}
    for a in sources:
        pg = a.get("Process Group Name")
        if not isinstance(pg, (str, int)):
            continue
        c = found.setdefault(f"pg:{pg}", {"pg_name": str(pg)})
        for key, value in (
            ("pg_desc", _str(a.get("Process Group Description"))),
            ("ranks", _ranks(a.get("Process Group Ranks"))),
            ("comm_size", _int32(a.get("Group size"), 1)),
            ("comm_rank", _int32(a.get("Rank"), 0)),
            ("device", _int32(a.get("device"), 0)),
        ):
            if c.get(key) is None:
                c[key] = value
    comms = {}
    for comm_id, c in found.items():
        ranks = c["ranks"]
        if ranks is not None and rank in ranks:
            c["comm_rank"] = ranks.index(rank)
            c["comm_size"] = c["comm_size"] or len(ranks)
        if c["comm_rank"] is not None and c["comm_size"] is not None:
            comms[comm_id] = {"comm_id": comm_id, **c}
    return comms


def _ranks(v: Any) -> list[int] | None:
    """Kineto "Process Group Ranks": a list or its string form (None when truncated with "...")."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    return v if isinstance(v, list) and all(_int32(r, 0) is not None for r in v) else None


def _memory_events(memory: list[_Event]) -> list[dict]:
    rows = []
    for seq, m in enumerate(sorted(memory, key=lambda m: m.start)):
        a = m.args
        size = _int(a.get("Bytes"), -INT64_MAX) or 0
        device_type = _int(a.get("Device Type"))
        rows.append(
            {
                "seq": seq,
                "ts_ns": m.start,
                "kind": "oom" if m.name == "[OutOfMemory]" else "free" if size < 0 else "alloc",
                "space": None if device_type is None else "host" if device_type == 0 else "device",
                "address": _int(a.get("Addr")),
                "bytes": abs(size),
                "device": _int32(a.get("Device Id"), 0),
                "allocated_bytes": _int(a.get("Total Allocated"), 0),
                "op_id": m.op.op_id if m.op else None,
            }
        )
    return rows


def _device(doc: dict, ops: list[_Event], work: list[_Event], hardware: str | None) -> dict:
    """The device the rank used (its most frequent device in the work), with its properties."""
    used = Counter(d for w in work if (d := _int32(w.args.get("device"), 0)) is not None)
    index = used.most_common(1)[0][0] if used else 0
    props = doc.get("deviceProperties")
    p = next((p for p in props if isinstance(p, dict) and p.get("id") == index), {}) if isinstance(props, list) else {}
    return {
        "device_index": index,
        "device_name": _str(p.get("name")),
        "hardware": hardware,
        "sm_major": _int32(p.get("computeMajor"), 0),
        "sm_minor": _int32(p.get("computeMinor"), 0),
        "sm_count": _int32(p.get("numSms"), 0),
        "memory_bytes": _int(p.get("totalGlobalMem"), 0),
        "hostname": _str(doc.get("host_name")),
        "pid": next((pid for o in ops if (pid := _int(o.thread[0], 0)) is not None), None),
    }


def _framework(docs: list[dict]) -> str | None:
    """``torch <version>`` from a ``torch_version``/``pytorch_version`` key a user added to the trace."""
    for doc in docs:
        for key in ("torch_version", "pytorch_version"):
            if isinstance(v := doc.get(key), str):
                return f"torch {v}"
    return None


def _cuda_version(docs: list[dict]) -> str | None:
    """``cuda_runtime_version`` (e.g. 12040) as ``12.4``."""
    for doc in docs:
        if (v := _int32(doc.get("cuda_runtime_version"), 1)) is not None:
            return f"{v // 1000}.{v % 1000 // 10}"
    return None


# ---------------------------------------------------------------- writing


def _write(out_dir: Path, run: dict, tables: dict[int, dict[str, list[dict]]]) -> None:
    """Write the run beside `out_dir`, then rename it into place (an empty `out_dir` is replaced)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex}.tmp"
    try:
        writer = RunWriter(tmp)
        writer.write("run", pa.Table.from_pylist([run], schema=file_schema("run")))
        for rank, rank_tables in tables.items():
            for name, rows in rank_tables.items():
                writer.write(name, pa.Table.from_pylist(rows, schema=file_schema(name)), rank=rank)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
