"""Export a run to MLCommons Chakra execution traces (the input of ASTRA-sim), and read them back.

One file per rank, ``<prefix>.<rank>.et``: a ``GlobalMetadata`` message (``version`` "0.0.4") then
one ``Node`` message per device call, each preceded by its size as a varint (the framing of
Chakra's ``protolib.encodeMessage``).

Schema: the messages are built here from descriptors (no chakra package needed), declaring only the
fields used, with the field numbers and types of ``schema/protobuf/et_def.proto`` (package
``ChakraProtoMsg``) of mlcommons/chakra at commit 6dc63e147b9d115286626cc122459e44d9d08401.
Attributes use the value types Chakra's ETFeeder reads (``comm_type``/``comm_size``/``num_ops``:
``int64_val``; ``tensor_size``: ``uint64_val``; ``comm_src``/``comm_dst``/``comm_tag``: ``int32_val``).

Device calls: an ``api_calls`` row is a device call, and becomes one node, when it has a
``device_start_ns``, a ``kernel_id``, GEMM dimensions (``gemm_m``), a ``memcpy_kind`` or a
``collective_name``; or its domain is ``device``; or its api is a copy or memset (the name contains
``memcpy``/``memset``, any case) or an NCCL collective or send/recv entry point (domain ``nccl``).

Nodes (``id`` = the call's ``seq``; ``name`` = kernel name, else api; attr ``is_cpu_op`` false and
``stream``):

* ``COMM_COLL_NODE`` for a recognised collective, with ``comm_type`` (``CollectiveCommType``),
  ``comm_size`` and ``pg_name`` (``communicators.pg_name``) when known;
* ``COMM_SEND_NODE``/``COMM_RECV_NODE`` for send/recv, with ``comm_src``/``comm_dst`` (global ranks,
  through ``communicators.ranks`` when known) and ``comm_tag`` = the index of the message among
  those from ``comm_src`` to ``comm_dst`` (so the k-th send matches the k-th receive), plus
  ``comm_size``/``pg_name``;
* ``COMP_NODE`` otherwise (also for unrecognised collectives), with ``num_ops`` = 2·m·n·k·batch for
  GEMMs and ``tensor_size`` = ``bytes`` when known.

``comm_size`` = ``in_msg_nelems`` (else ``out_msg_nelems``) × the size of ``comm_dtype``, else
``bytes``. ``start_time_micros`` = device start (else host start), truncated to microseconds;
``duration_micros`` = ``device_duration_ns`` (else ``duration_ns``) to the nearest microsecond.

Dependencies: each node depends on the previous node of its stream (a null stream is the legacy
default stream 0), and on the node an event captured when the stream waits on it
(``...StreamWaitEvent`` → the last node of the recording stream at the most recent
``...EventRecord`` of the same ``event_id``). They are written to ``ctrl_deps`` and, since Chakra's
ETFeeder (and so ASTRA-sim) schedules on ``data_deps`` only, to ``data_deps`` as well. Host-side
synchronisation is not represented.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from ..columns import SPEC_VERSION
from ..errors import TraceCorruptError
from ..reader import Run
from ..vocabulary import collective_name, dtype_bytes
from ..writer import atomic_path

CHAKRA_VERSION = "0.0.4"
BATCH_ROWS = 64 * 1024

NODE_TYPES = {
    "INVALID_NODE": 0,
    "METADATA_NODE": 1,
    "MEM_LOAD_NODE": 2,
    "MEM_STORE_NODE": 3,
    "COMP_NODE": 4,
    "COMM_SEND_NODE": 5,
    "COMM_RECV_NODE": 6,
    "COMM_COLL_NODE": 7,
    "STORAGE_NODE": 8,
    "BATCH_NODE": 9,
    "CHECKPOINT_NODE": 10,
}
COLLECTIVE_COMM_TYPES = {
    "ALL_REDUCE": 0,
    "REDUCE": 1,
    "ALL_GATHER": 2,
    "GATHER": 3,
    "SCATTER": 4,
    "BROADCAST": 5,
    "ALL_TO_ALL": 6,
    "REDUCE_SCATTER": 7,
    "REDUCE_SCATTER_BLOCK": 8,
    "BARRIER": 9,
}

_COMM_TYPE = {
    "allreduce": "ALL_REDUCE",
    "reducescatter": "REDUCE_SCATTER",
    "allgather": "ALL_GATHER",
    "alltoall": "ALL_TO_ALL",
    "broadcast": "BROADCAST",
    "reduce": "REDUCE",
    "gather": "GATHER",
    "scatter": "SCATTER",
    "barrier": "BARRIER",
    "send": "send",
    "recv": "recv",
}
"""Trace collective name -> CollectiveCommType name, or "send"/"recv"."""
_COLUMNS = [
    "seq",
    "api",
    "domain",
    "start_ns",
    "duration_ns",
    "stream_id",
    "device_start_ns",
    "device_duration_ns",
    "kernel_id",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gemm_batch",
    "bytes",
    "memcpy_kind",
    "comm_id",
    "collective_name",
    "in_msg_nelems",
    "out_msg_nelems",
    "comm_dtype",
    "peer_rank",
    "event_id",
]


def _descriptors() -> descriptor_pool.DescriptorPool:
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="maya_chakra_et_def.proto", package="ChakraProtoMsg", syntax="proto3")
    node_type = f.enum_type.add(name="NodeType")
    for name, number in NODE_TYPES.items():
        node_type.value.add(name=name, number=number)
    attr_type = ".ChakraProtoMsg.AttributeProto"

    def field(
        msg: descriptor_pb2.DescriptorProto,
        name: str,
        number: int,
        type_: int,
        *,
        repeated: bool = False,
        type_name: str = "",
        oneof: bool = False,
    ) -> None:
        fld = msg.field.add(
            name=name, number=number, type=type_, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
        )
        if type_name:
            fld.type_name = type_name
        if oneof:
            fld.oneof_index = 0

    attr = f.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    field(attr, "name", 1, F.TYPE_STRING)
    field(attr, "int32_val", 7, F.TYPE_INT32, oneof=True)
    field(attr, "int64_val", 9, F.TYPE_INT64, oneof=True)
    field(attr, "uint64_val", 13, F.TYPE_UINT64, oneof=True)
    field(attr, "bool_val", 27, F.TYPE_BOOL, oneof=True)
    field(attr, "string_val", 29, F.TYPE_STRING, oneof=True)
    meta = f.message_type.add(name="GlobalMetadata")
    field(meta, "version", 1, F.TYPE_STRING)
    field(meta, "attr", 2, F.TYPE_MESSAGE, repeated=True, type_name=attr_type)
    node = f.message_type.add(name="Node")
    field(node, "id", 1, F.TYPE_UINT64)
    field(node, "name", 2, F.TYPE_STRING)
    field(node, "type", 3, F.TYPE_ENUM, type_name=".ChakraProtoMsg.NodeType")
    field(node, "ctrl_deps", 4, F.TYPE_UINT64, repeated=True)
    field(node, "data_deps", 5, F.TYPE_UINT64, repeated=True)
    field(node, "start_time_micros", 6, F.TYPE_UINT64)
    field(node, "duration_micros", 7, F.TYPE_UINT64)
    field(node, "attr", 10, F.TYPE_MESSAGE, repeated=True, type_name=attr_type)
    pool = descriptor_pool.DescriptorPool()  # private: no clash with a real chakra et_def_pb2
    pool.AddSerializedFile(f.SerializeToString())
    return pool


_POOL = _descriptors()
AttributeProto = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("ChakraProtoMsg.AttributeProto"))
GlobalMetadata = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("ChakraProtoMsg.GlobalMetadata"))
Node = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("ChakraProtoMsg.Node"))
_NODE_TYPE_NAMES = {v: k for k, v in NODE_TYPES.items()}


# ---------------------------------------------------------------- export


def export_chakra(run_dir: str | Path, out_prefix: str | Path) -> list[Path]:
    """Write one Chakra ET file per rank of the run, ``<out_prefix>.<rank>.et``; returns their paths."""
    run = Run(run_dir)
    devices = {d["rank"]: d["device_name"] for d in run.table("devices").to_pylist()}
    paths = []
    for rank in run.ranks:
        meta = GlobalMetadata(
            version=CHAKRA_VERSION,
            attr=[
                _attr("schema", f"maya_trace_spec {SPEC_VERSION}"),
                _attr("run_id", run.info["run_id"]),
                _attr("source", run.info["source"]),
                _attr("rank", rank),
                _attr("world_size", run.info["world_size"]),
                *([_attr("device_name", devices[rank])] if devices.get(rank) else []),
            ],
        )
        path = Path(f"{out_prefix}.{rank}.et")
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            _write_message(fh, meta)
            for node in _nodes(run, rank):
                _write_message(fh, node)
        paths.append(path)
    return paths


def is_device_call(row: dict) -> bool:
    """Whether an ``api_calls`` row (as a dict) launches device work and so becomes a node."""
    api = row["api"].lower()
    return (
        any(row[c] is not None for c in ("device_start_ns", "kernel_id", "gemm_m", "memcpy_kind", "collective_name"))
        or row["domain"] == "device"
        or "memcpy" in api
        or "memset" in api
        or (row["domain"] == "nccl" and _collective(row) is not None)
    )


def _collective(row: dict) -> str | None:
    """CollectiveCommType name, ``"send"`` or ``"recv"`` of a communication row, else None."""
    name = row["collective_name"]
    if name is None and row["domain"] == "nccl":
        name = row["api"].removeprefix("nccl")
    if name is None:
        return None
    return _COMM_TYPE.get(collective_name(name))


def _nodes(run: Run, rank: int) -> Iterator[Message]:
    kernels = {k["kernel_id"]: k["demangled"] or k["name"] for k in run.table("kernels", [rank]).to_pylist()}
    comms = {c["comm_id"]: c for c in run.table("communicators", [rank]).to_pylist()}
    last: dict[int, int] = {}  # stream -> id of its last node
    recorded: dict[int, int | None] = {}  # event -> node it captured
    waits: dict[int, list[int]] = {}  # stream -> nodes its next node must wait for
    messages: Counter[tuple[int, int]] = Counter()  # (src, dst) -> p2p messages so far
    calls = run.table("api_calls", [rank]).select(_COLUMNS).sort_by("seq")
    for batch in calls.to_batches(BATCH_ROWS):
        for r in batch.to_pylist():
            stream = r["stream_id"] if r["stream_id"] is not None else 0
            api = r["api"].lower()
            if r["event_id"] is not None and "eventrecord" in api:
                recorded[r["event_id"]] = last.get(stream)
            elif r["event_id"] is not None and "streamwaitevent" in api:
                if recorded.get(r["event_id"]) is not None:
                    waits.setdefault(stream, []).append(recorded[r["event_id"]])
            if not is_device_call(r):
                continue
            deps = [last[stream]] if stream in last else []
            deps += [d for d in dict.fromkeys(waits.pop(stream, ())) if d not in deps]
            last[stream] = r["seq"]
            yield _node(r, rank, stream, deps, kernels, comms, messages)


def _node(
    r: dict, rank: int, stream: int, deps: list[int], kernels: dict[int, str], comms: dict[str, dict], messages: Counter
) -> Message:
    node = Node(id=r["seq"], name=kernels.get(r["kernel_id"]) or r["api"], ctrl_deps=deps, data_deps=deps)
    start = r["device_start_ns"] if r["device_start_ns"] is not None else r["start_ns"]
    if start >= 0:
        node.start_time_micros = start // 1000
    duration = r["device_duration_ns"] if r["device_duration_ns"] is not None else r["duration_ns"]
    if duration is not None and duration > 0:
        node.duration_micros = (duration + 500) // 1000
    attrs = [_attr("is_cpu_op", False), _attr("stream", stream)]
    kind = _collective(r)
    comm = comms.get(r["comm_id"], {})
    if kind is None:
        node.type = NODE_TYPES["COMP_NODE"]
        if None not in (r["gemm_m"], r["gemm_n"], r["gemm_k"]):
            batch = r["gemm_batch"] if r["gemm_batch"] is not None else 1
            attrs.append(_attr("num_ops", 2 * r["gemm_m"] * r["gemm_n"] * r["gemm_k"] * batch))
        if r["bytes"] is not None:
            attrs.append(_attr("tensor_size", r["bytes"], "uint64_val"))
    else:
        if kind in COLLECTIVE_COMM_TYPES:
            node.type = NODE_TYPES["COMM_COLL_NODE"]
            attrs.append(_attr("comm_type", COLLECTIVE_COMM_TYPES[kind]))
        else:
            node.type = NODE_TYPES["COMM_SEND_NODE" if kind == "send" else "COMM_RECV_NODE"]
            if r["peer_rank"] is not None:
                members = comm.get("ranks") or []
                peer = members[r["peer_rank"]] if r["peer_rank"] < len(members) else r["peer_rank"]
                src, dst = (rank, peer) if kind == "send" else (peer, rank)
                attrs += [
                    _attr("comm_src", src, "int32_val"),
                    _attr("comm_dst", dst, "int32_val"),
                    _attr("comm_tag", messages[src, dst], "int32_val"),
                ]
                messages[src, dst] += 1
        size = _comm_size(r)
        if size is not None:
            attrs.append(_attr("comm_size", size))
        if comm.get("pg_name"):
            attrs.append(_attr("pg_name", comm["pg_name"]))
    node.attr.extend(attrs)
    return node


def _comm_size(r: dict) -> int | None:
    nelems = r["in_msg_nelems"] if r["in_msg_nelems"] is not None else r["out_msg_nelems"]
    itemsize = dtype_bytes(r["comm_dtype"])
    if nelems is not None and itemsize is not None:
        return nelems * itemsize
    return r["bytes"]


def _attr(name: str, value: Any, field: str | None = None) -> Message:
    """An AttributeProto; `field` defaults to bool_val, int64_val or string_val by the value's type."""
    if field is None:
        field = "bool_val" if isinstance(value, bool) else "int64_val" if isinstance(value, int) else "string_val"
    return AttributeProto(name=name, **{field: value})


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _write_message(fh: IO[bytes], msg: Message) -> None:
    data = msg.SerializeToString()
    fh.write(_varint(len(data)))
    fh.write(data)


# ---------------------------------------------------------------- reading


def read_chakra(path: str | Path) -> tuple[dict, list[dict]]:
    """Decode a Chakra ET file into (metadata, nodes) as plain dicts.

    Metadata: ``{"version", "attr"}``; node: ``{"id", "name", "type" (NodeType name), "ctrl_deps",
    "data_deps", "start_time_micros", "duration_micros", "attr"}``; ``attr`` maps each attribute name
    to its value. Only the fields declared here are decoded; others are skipped.
    """
    path = Path(path)
    data = path.read_bytes()
    messages = _split(path, data)
    if not messages:
        raise TraceCorruptError(path, "empty Chakra trace (no GlobalMetadata)")
    try:
        meta = GlobalMetadata.FromString(messages[0])
        nodes = [Node.FromString(m) for m in messages[1:]]
    except DecodeError as e:
        raise TraceCorruptError(path, f"not a Chakra execution trace: {e}") from None
    return (
        {"version": meta.version, "attr": _attrs(meta.attr)},
        [
            {
                "id": n.id,
                "name": n.name,
                "type": _NODE_TYPE_NAMES.get(n.type, str(n.type)),
                "ctrl_deps": list(n.ctrl_deps),
                "data_deps": list(n.data_deps),
                "start_time_micros": n.start_time_micros,
                "duration_micros": n.duration_micros,
                "attr": _attrs(n.attr),
            }
            for n in nodes
        ],
    )


def _attrs(attrs) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) if a.WhichOneof("value") else None for a in attrs}


def _split(path: Path, data: bytes) -> list[bytes]:
    """The messages of a varint-length-delimited stream."""
    out, pos = [], 0
    while pos < len(data):
        size = shift = 0
        while True:
            if pos >= len(data) or shift > 63:
                raise TraceCorruptError(path, f"bad message length prefix at byte {pos}")
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + size > len(data):
            raise TraceCorruptError(path, f"truncated message at byte {pos} ({size} bytes announced)")
        out.append(data[pos : pos + size])
        pos += size
    return out
