"""Chakra execution-trace export (maya_trace_spec.interop.chakra)."""

from collections import defaultdict
from pathlib import Path

import pytest

from maya_trace_spec import RunWriter, TraceCorruptError, read_table
from maya_trace_spec.interop import chakra
from maya_trace_spec.interop.chakra import COLLECTIVE_COMM_TYPES, export_chakra, read_chakra

# Field numbers of mlcommons/chakra schema/protobuf/et_def.proto
ET_DEF = {
    "ChakraProtoMsg.Node": {
        "id": 1,
        "name": 2,
        "type": 3,
        "ctrl_deps": 4,
        "data_deps": 5,
        "start_time_micros": 6,
        "duration_micros": 7,
        "attr": 10,
    },
    "ChakraProtoMsg.GlobalMetadata": {"version": 1, "attr": 2},
    "ChakraProtoMsg.AttributeProto": {
        "name": 1,
        "int32_val": 7,
        "int64_val": 9,
        "uint64_val": 13,
        "bool_val": 27,
        "string_val": 29,
    },
}


def test_descriptors_follow_et_def():
    for cls in (chakra.Node, chakra.GlobalMetadata, chakra.AttributeProto):
        d = cls.DESCRIPTOR
        assert {f.name: f.number for f in d.fields} == ET_DEF[d.full_name]
    assert chakra.Node.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_name["COMM_COLL_NODE"].number == 7


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def test_synthetic_run(run_dir, tmp_path):
    paths = export_chakra(run_dir, tmp_path / "et" / "trace")
    assert paths == [tmp_path / "et" / "trace.0.et", tmp_path / "et" / "trace.1.et"]
    assert sorted(p.name for p in (tmp_path / "et").iterdir()) == ["trace.0.et", "trace.1.et"]
    calls = read_table(run_dir, "api_calls").to_pylist()
    for rank, path in enumerate(paths):
        meta, nodes = read_chakra(path)
        assert meta["version"] == "0.0.4" and meta["attr"]["rank"] == rank and meta["attr"]["world_size"] == 2
        mine = [c for c in calls if c["rank"] == rank]
        # synthetic device calls: every kernel launch, GEMM, copy and collective; not event records
        device = [c for c in mine if c["api"] != "cudaEventRecord"]
        assert [n["id"] for n in nodes] == [c["seq"] for c in device]
        assert len(nodes) == sum(chakra.is_device_call(c) for c in mine)
        by_seq = {c["seq"]: c for c in mine}
        streams = defaultdict(list)
        for n in nodes:
            c = by_seq[n["id"]]
            assert n["attr"]["is_cpu_op"] is False and n["attr"]["stream"] == c["stream_id"]
            assert n["duration_micros"] == (c["duration_ns"] + 500) // 1000  # nearest, halves up
            if c["api"] == "ncclAllReduce":
                assert n["type"] == "COMM_COLL_NODE" and n["name"].startswith("ncclDevKernel_AllReduce")
                assert n["attr"]["comm_type"] == COLLECTIVE_COMM_TYPES["ALL_REDUCE"] == 0
                assert n["attr"]["pg_name"] == "0" and "comm_size" not in n["attr"]  # no comm_dtype
            else:
                assert n["type"] == "COMP_NODE"
            if c["api"] == "cublasLtMatmul":
                assert n["attr"]["num_ops"] == 2 * c["gemm_m"] * c["gemm_n"] * c["gemm_k"]
            if c["api"] == "cudaMemcpyAsync":
                assert n["attr"]["tensor_size"] == c["bytes"] and n["name"] == "cudaMemcpyAsync"
            streams[n["attr"]["stream"]].append(n)
        assert set(streams) == {7, 13}
        for chain in streams.values():  # one chain per stream, in seq order
            assert chain[0]["ctrl_deps"] == []
            for prev, node in zip(chain, chain[1:]):
                assert node["ctrl_deps"] == node["data_deps"] == [prev["id"]]


def test_varint_framing(run_dir, tmp_path):
    path = export_chakra(run_dir, tmp_path / "t")[0]
    data = path.read_bytes()
    size, pos = read_varint(data, 0)
    expected = (data[0] & 0x7F) | (data[1] << 7) if data[0] & 0x80 else data[0]  # 1- or 2-byte prefix
    assert size == expected and pos == 1 + (data[0] >> 7)
    assert chakra.GlobalMetadata.FromString(data[pos : pos + size]).version == "0.0.4"
    count, multibyte = 0, 0
    pos = 0
    while pos < len(data):
        start = pos
        size, pos = read_varint(data, pos)
        multibyte += pos - start > 1
        msg = data[pos : pos + size]
        assert len(msg) == size
        if count:
            chakra.Node.FromString(msg)
        pos += size
        count += 1
    assert pos == len(data)
    assert count == 1 + len(read_chakra(path)[1])
    assert multibyte  # long kernel names: nodes over 127 bytes, prefixes of two bytes


def write_comm_run(run_dir: Path) -> Path:
    """Two ranks: streams with an event dependency, collectives of every kind, send/recv pairs."""
    w = RunWriter(run_dir)
    w.write(
        "run",
        {"run_id": ["c"], "created_at_ns": [0], "source": ["profiler"], "status": ["complete"], "world_size": [2]},
    )
    for rank in (0, 1):
        peer = 1 - rank
        w.write("kernels", {"kernel_id": [0], "name": ["_Z4gemm"], "demangled": ["gemm"]}, rank=rank)
        w.write(
            "communicators",
            {
                "comm_id": ["world", "pair"],
                "comm_rank": [rank, 0],
                "comm_size": [2, 2],
                "pg_name": ["0", None],
                "ranks": [[0, 1], [rank, peer]],
            },
            rank=rank,
        )
        rows = [
            # seq 0: GEMM on stream 7, then event 3 recorded on stream 7
            dict(
                api="cublasGemmEx",
                domain="cublas",
                stream_id=7,
                kernel_id=0,
                gemm_m=64,
                gemm_n=32,
                gemm_k=16,
                gemm_batch=4,
                device_start_ns=10_000,
                device_duration_ns=2_499,
            ),
            dict(api="cudaEventRecord", domain="runtime", stream_id=7, event_id=3),
            dict(api="cudaLaunchKernel", domain="runtime", stream_id=7, kernel_id=0),  # after the record
            dict(api="cudaStreamWaitEvent", domain="runtime", stream_id=13, event_id=3),
            dict(
                api="ncclAllReduce",
                domain="nccl",
                stream_id=13,
                comm_id="world",
                collective_name="allreduce",
                in_msg_nelems=1000,
                comm_dtype="bf16",
                duration_ns=7_600,
            ),
            dict(
                api="ncclAllGather",
                domain="nccl",
                stream_id=13,
                comm_id="world",
                in_msg_nelems=10,
                comm_dtype="float32",
            ),
            dict(
                api="ncclReduceScatter",
                domain="nccl",
                stream_id=13,
                comm_id="world",
                collective_name="_reduce_scatter_base",
                in_msg_nelems=8,
                comm_dtype="fp64",
            ),
            dict(
                api="ncclBroadcast",
                domain="nccl",
                stream_id=13,
                comm_id="world",
                collective_name="broadcast",
                in_msg_nelems=3,
                comm_dtype="int8",
                root_rank=0,
            ),
            dict(
                api="ncclAllToAll",
                domain="nccl",
                stream_id=13,
                comm_id="world",
                collective_name="all_to_all",
                in_msg_nelems=5,
                comm_dtype="ncclFloat16",
            ),
            dict(api="ncclGroupStart", domain="nccl"),
            dict(
                api="ncclSend" if rank == 0 else "ncclRecv",
                domain="nccl",
                stream_id=13,
                comm_id="pair",
                peer_rank=1,
                in_msg_nelems=4,
                comm_dtype="fp32",
            ),
            dict(
                api="ncclSend" if rank == 0 else "ncclRecv",
                domain="nccl",
                stream_id=13,
                comm_id="pair",
                collective_name="send" if rank == 0 else "recv",
                peer_rank=1,
                bytes=99,
            ),
            dict(api="ncclGroupEnd", domain="nccl"),
            dict(api="cudaMalloc", domain="runtime", bytes=1 << 20),
            dict(api="cudaMemsetAsync", domain="runtime", bytes=256),  # null stream: default stream 0
            dict(api="kernel", domain="device", stream_id=0, device_start_ns=50_000, device_duration_ns=400),
        ]
        cols = sorted({k for r in rows for k in r})
        table = {k: [r.get(k) for r in rows] for k in cols}
        n = len(rows)
        table.update(seq=list(range(n)), start_ns=[1_000 * i for i in range(n)], time_source=["measured"] * n)
        w.write("api_calls", table, rank=rank)
    return run_dir


def test_collectives_p2p_and_events(tmp_path):
    run_dir = write_comm_run(tmp_path / "run")
    paths = export_chakra(run_dir, tmp_path / "et")
    decoded = [{n["id"]: n for n in read_chakra(p)[1]} for p in paths]
    for _rank, nodes in enumerate(decoded):
        assert sorted(nodes) == [0, 2, 4, 5, 6, 7, 8, 10, 11, 14, 15]  # no events, group calls, malloc
        gemm = nodes[0]
        assert (gemm["name"], gemm["type"], gemm["attr"]["num_ops"]) == ("gemm", "COMP_NODE", 2 * 64 * 32 * 16 * 4)
        assert gemm["start_time_micros"] == 10 and gemm["duration_micros"] == 2  # 2.499 us rounds to 2
        assert nodes[2]["ctrl_deps"] == [0] and nodes[2]["start_time_micros"] == 2
        # the wait on event 3 ties stream 13's first node to the GEMM (recorded before seq 2)
        assert nodes[4]["ctrl_deps"] == nodes[4]["data_deps"] == [0]
        assert nodes[5]["ctrl_deps"] == [4]
        expected = {
            4: ("ALL_REDUCE", 2000),
            5: ("ALL_GATHER", 40),
            6: ("REDUCE_SCATTER", 64),
            7: ("BROADCAST", 3),
            8: ("ALL_TO_ALL", 10),
        }
        for seq, (kind, size) in expected.items():
            node = nodes[seq]
            assert node["type"] == "COMM_COLL_NODE"
            assert (node["attr"]["comm_type"], node["attr"]["comm_size"]) == (COLLECTIVE_COMM_TYPES[kind], size)
            assert node["attr"]["pg_name"] == "0"
        assert nodes[4]["duration_micros"] == 8  # host duration when there is no device time
        assert nodes[14]["attr"]["tensor_size"] == 256 and nodes[14]["attr"]["stream"] == 0
        assert nodes[15]["ctrl_deps"] == [14] and nodes[15]["duration_micros"] == 0
    send0, send1 = decoded[0][10], decoded[0][11]
    recv0, recv1 = decoded[1][10], decoded[1][11]
    assert send0["type"] == send1["type"] == "COMM_SEND_NODE"
    assert recv0["type"] == recv1["type"] == "COMM_RECV_NODE"
    for s, r, tag in ((send0, recv0, 0), (send1, recv1, 1)):
        assert s["attr"]["comm_src"] == r["attr"]["comm_src"] == 0
        assert s["attr"]["comm_dst"] == r["attr"]["comm_dst"] == 1
        assert s["attr"]["comm_tag"] == r["attr"]["comm_tag"] == tag
        assert "pg_name" not in s["attr"]
    assert send0["attr"]["comm_size"] == 16 and send1["attr"]["comm_size"] == 99


def test_failed_export_keeps_old_files(run_dir, tmp_path, monkeypatch):
    old = tmp_path / "t.0.et"
    old.write_bytes(b"old")

    def broken(run, rank):
        raise RuntimeError("disk full")
        yield

    monkeypatch.setattr(chakra, "_nodes", broken)
    with pytest.raises(RuntimeError):
        export_chakra(run_dir, tmp_path / "t")
    assert old.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "t.0.et"]


def test_read_rejects_truncated(run_dir, tmp_path):
    path = export_chakra(run_dir, tmp_path / "t")[0]
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(TraceCorruptError, match="truncated"):
        read_chakra(path)
    path.write_bytes(b"")
    with pytest.raises(TraceCorruptError):
        read_chakra(path)


def test_emulated_rank_without_calls(tmp_path):
    w = RunWriter(tmp_path / "run")
    w.write(
        "run",
        {"run_id": ["e"], "created_at_ns": [0], "source": ["emulator"], "status": ["complete"], "world_size": [1]},
    )
    w.write("devices", {"device_index": [0]}, rank=0)
    (path,) = export_chakra(tmp_path / "run", tmp_path / "out")
    meta, nodes = read_chakra(path)
    assert nodes == [] and meta["attr"]["rank"] == 0
