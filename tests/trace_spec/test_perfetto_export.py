"""Chrome Trace Event JSON export (maya_trace_spec.interop.perfetto)."""

import json
import re
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maya_trace_spec import RunWriter, TraceError, read_table
from maya_trace_spec.interop import perfetto
from maya_trace_spec.interop.perfetto import STREAM_TID_BASE, export_perfetto


def expected_x(run_dir: Path) -> int:
    calls = read_table(run_dir, "api_calls")
    return (
        calls.num_rows
        + (pc.sum(pc.is_valid(calls["device_start_ns"])).as_py() or 0)
        + read_table(run_dir, "ops").num_rows
    )


def events(out: Path, ph: str) -> list[dict]:
    return [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == ph]


def meta(out: Path, name: str) -> dict[tuple[int, int], object]:
    return {(e["pid"], e["tid"]): next(iter(e["args"].values())) for e in events(out, "M") if e["name"] == name}


def test_synthetic_run(run_dir, tmp_path):
    out = tmp_path / "trace.json"
    stats = export_perfetto(run_dir, out)
    doc = json.loads(out.read_text())
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["run_id"] == read_table(run_dir, "run")["run_id"][0].as_py()
    assert stats.slices == len(events(out, "X")) == expected_x(run_dir) == 2 * 500 + 2 * 50
    assert (stats.api_slices, stats.device_slices, stats.op_slices, stats.flows) == (1000, 0, 100, 0)
    assert stats.counters == len(events(out, "C")) == 4  # emulated: host tracks and memory only
    assert meta(out, "process_name") == {
        (0, 0): "rank 0 (NVIDIA H100 80GB HBM3)",
        (1, 0): "rank 1 (NVIDIA H100 80GB HBM3)",
    }
    assert meta(out, "thread_name") == {
        (0, 1000): "thread 1000",
        (1, 1001): "thread 1001",
        (0, 0): "thread 0",
        (1, 0): "thread 0",
    }  # ops: no thread_id
    assert Counter((e["pid"], e["tid"], e["cat"]) for e in events(out, "X")) == {
        (0, 1000, "api"): 500,
        (1, 1001, "api"): 500,
        (0, 0, "op"): 50,
        (1, 0, "op"): 50,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.json"]  # no temporary left


def write_device_run(run_dir: Path) -> Path:
    w = RunWriter(run_dir)
    w.write(
        "run",
        {"run_id": ["r1"], "created_at_ns": [1], "source": ["profiler"], "status": ["complete"], "world_size": [2]},
    )
    w.write("devices", {"device_index": [0], "device_name": ["NVIDIA H100"]}, rank=0)
    w.write("devices", {"device_index": [1]}, rank=1)
    w.write("kernels", {"kernel_id": [0, 1], "name": ["_Z4gemmv", "_Z3addv"], "demangled": ["gemm()", None]}, rank=0)
    big = 1_700_000_000_123_456_789  # epoch ns: written exactly even beyond double precision
    w.write(
        "api_calls",
        {
            "seq": [0, 1, 2, 3, 4, 5],
            "thread_id": [11, 11, 12, None, 11, 11],
            "api": ["cublasGemmEx", "cudaLaunchKernel", "cudaMemcpyAsync", "kernel", "cudaMalloc", "ncclAllReduce"],
            "domain": ["cublas", "runtime", "runtime", "device", "runtime", "nccl"],
            "start_ns": [1_234_567, 2_000_000, 3_000_001, 4_000_000, 5_000_000, big],
            "duration_ns": [5_000, 4_000, None, 100, 900, 2_000],
            "time_source": ["measured"] * 6,
            "stream_id": [7, 7, None, 13, None, 13],
            "device_start_ns": [1_300_000, 2_100_000, 3_100_000, 4_000_000, None, big + 10_000],
            "device_duration_ns": [70_001, 5, 20_000, None, None, 123_456],
            "kernel_id": [0, 1, None, 1, None, None],
            "grid_x": [132, 8, None, None, None, None],
            "grid_y": [1, 1, None, None, None, None],
            "grid_z": [1, 1, None, None, None, None],
            "block_x": [256, 128, None, None, None, None],
            "block_y": [1, 1, None, None, None, None],
            "block_z": [1, 1, None, None, None, None],
            "gemm_m": [4096, None, None, None, None, None],
            "gemm_n": [1024, None, None, None, None, None],
            "gemm_k": [512, None, None, None, None, None],
            "bytes": [None, None, 1 << 20, None, 1 << 30, None],
            "memcpy_kind": [None, None, "HtoD", None, None, None],
            "collective_name": [None] * 5 + ["allreduce"],
            "comm_dtype": [None] * 5 + ["bf16"],
            "in_msg_nelems": [None] * 5 + [1 << 20],
        },
        rank=0,
    )
    w.write(
        "ops",
        {
            "op_id": [0, 1],
            "parent_op_id": [None, 0],
            "name": ["aten::linear", "aten::mm"],
            "thread_id": [11, 11],
            "start_ns": [1_000_000, 1_100_000],
            "end_ns": [9_000_000, 8_000_000],
            "module_path": ["model.fc", "model.fc"],
        },
        rank=0,
    )
    w.write(
        "memory_events",
        {
            "seq": [0, 1, 2],
            "ts_ns": [10, 20, 30],
            "kind": ["alloc", "alloc", "free"],
            "bytes": [512, 512, 512],
            "allocated_bytes": [512, None, 0],
        },
        rank=0,
    )
    w.write(
        "api_calls",
        {
            "seq": [0],
            "api": ["cudaLaunchKernel"],
            "domain": ["runtime"],
            "start_ns": [0],
            "duration_ns": [1_000],
            "time_source": ["measured"],
            "thread_id": [5],
            "stream_id": [0],
            "device_start_ns": [3_000],
            "device_duration_ns": [1_500],
        },
        rank=1,
    )
    return run_dir


def test_device_run(tmp_path):
    run_dir = write_device_run(tmp_path / "run")
    out = tmp_path / "out" / "trace.json"
    stats = export_perfetto(run_dir, out)
    xs = events(out, "X")
    assert len(xs) == stats.slices == expected_x(run_dir) == 7 + 6 + 2
    assert (stats.api_slices, stats.device_slices, stats.op_slices, stats.counters) == (7, 6, 2, 2)

    s7, s13, s0 = STREAM_TID_BASE + 7, STREAM_TID_BASE + 13, STREAM_TID_BASE
    names = meta(out, "thread_name")
    assert names == {
        (0, 11): "thread 11",
        (0, 12): "thread 12",
        (0, 0): "thread 0",
        (0, s7): "stream 7",
        (0, s0): "stream 0",
        (0, s13): "stream 13",
        (1, 5): "thread 5",
        (1, s0): "stream 0",
    }
    sort = meta(out, "thread_sort_index")
    assert max(v for (p, t), v in sort.items() if t < STREAM_TID_BASE) < min(
        v for (p, t), v in sort.items() if t >= STREAM_TID_BASE
    )  # streams after host threads
    assert meta(out, "process_name") == {(0, 0): "rank 0 (NVIDIA H100)", (1, 0): "rank 1"}

    api = {(e["pid"], e["args"]["seq"]): e for e in xs if e["cat"] == "api"}
    dev = {(e["pid"], e["args"]["seq"]): e for e in xs if e["cat"] == "device"}
    assert api[0, 0]["ts"] == 1234.567 and api[0, 0]["dur"] == 5.0 and api[0, 0]["tid"] == 11
    assert api[0, 2]["dur"] == 0 and api[0, 3]["tid"] == 0
    gemm = dev[0, 0]
    assert (gemm["name"], gemm["tid"], gemm["ts"], gemm["dur"]) == ("gemm()", s7, 1300.0, 70.001)
    assert gemm["args"]["grid"] == [132, 1, 1] and gemm["args"]["block"] == [256, 1, 1]
    assert (gemm["args"]["gemm_m"], gemm["args"]["gemm_n"], gemm["args"]["gemm_k"]) == (4096, 1024, 512)
    assert dev[0, 1]["name"] == "_Z3addv" and dev[0, 1]["dur"] == 0.005
    copy = dev[0, 2]
    assert (copy["name"], copy["tid"], copy["args"]["bytes"], copy["args"]["memcpy_kind"]) == (
        "cudaMemcpyAsync",
        s0,
        1 << 20,
        "HtoD",
    )
    assert "grid" not in copy["args"] and "gemm_m" not in copy["args"]
    nccl = dev[0, 5]
    assert (nccl["tid"], nccl["args"]["collective_name"], nccl["args"]["in_msg_nelems"]) == (s13, "allreduce", 1 << 20)
    assert (0, 4) not in dev  # cudaMalloc: no device work
    assert dev[1, 0]["tid"] == s0 and dev[1, 0]["ts"] == 3.0
    raw = out.read_text()
    assert '"ts":1700000000123456.789' in raw and '"ts":1700000000123466.789,"dur":123.456' in raw

    ops = {e["name"]: e for e in xs if e["cat"] == "op"}
    parent, child = ops["aten::linear"], ops["aten::mm"]
    assert parent["tid"] == child["tid"] == 11 and (parent["ts"], parent["dur"]) == (1000.0, 8000.0)
    assert parent["ts"] <= child["ts"] and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"]
    assert child["args"]["parent_op_id"] == 0 and child["args"]["module_path"] == "model.fc"

    starts = {e["id"]: e for e in events(out, "s")}
    ends = {e["id"]: e for e in events(out, "f")}
    assert starts.keys() == ends.keys() and len(starts) == stats.flows == 5  # not the "device" row
    for fid, s in starts.items():
        f = ends[fid]
        assert f["bp"] == "e" and s["pid"] == f["pid"] and s["tid"] < STREAM_TID_BASE <= f["tid"]
    assert {(e["pid"], e["ts"], e["args"]["allocated_bytes"]) for e in events(out, "C")} == {
        (0, 0.01, 512),
        (0, 0.03, 0),
    }


def test_overwrites_atomically(run_dir, tmp_path):
    out = tmp_path / "trace.json"
    out.write_text("old")
    export_perfetto(run_dir, out)
    assert json.loads(out.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.json"]


def test_failed_export_keeps_the_old_file(run_dir, tmp_path, monkeypatch):
    out = tmp_path / "trace.json"
    out.write_text("old")

    def broken(run, stats):
        yield '{"ph":"M"}'
        raise RuntimeError("disk full")

    monkeypatch.setattr(perfetto, "_events", broken)
    with pytest.raises(RuntimeError):
        export_perfetto(run_dir, out)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.json"]


def test_microseconds_are_exact_decimals(tmp_path):
    w = RunWriter(tmp_path / "run")
    w.write(
        "run",
        {"run_id": ["r"], "created_at_ns": [0], "source": ["emulator"], "status": ["complete"], "world_size": [1]},
    )
    w.write(
        "api_calls",
        {
            "seq": [0, 1],
            "api": ["cudaMalloc"] * 2,
            "domain": ["runtime"] * 2,
            "start_ns": [-1_500, 7],
            "duration_ns": [1, 999_999_999_999],
            "time_source": ["emulated"] * 2,
        },
        rank=0,
    )
    out = tmp_path / "t.json"
    export_perfetto(tmp_path / "run", out)
    stamps = re.findall(r'"ts":([-0-9.]+),"dur":([0-9.]+)', out.read_text())
    assert stamps == [("-1.500", "0.001"), ("0.007", "999999999.999")]


# ------------------------------------------------------------------ property: any valid run

_opt = lambda s: st.one_of(st.none(), s)  # noqa: E731
_api_row = st.fixed_dictionaries(
    {
        "thread_id": _opt(st.integers(0, 2**22)),
        "api": st.sampled_from(["cudaLaunchKernel", "cublasGemmEx", "ncclAllReduce", "kernel", "cudaMalloc"]),
        "domain": st.sampled_from(["runtime", "cublas", "nccl", "device", "other"]),
        "start_ns": st.integers(-(2**62), 2**62),
        "duration_ns": _opt(st.integers(0, 2**40)),
        "time_source": st.sampled_from(["emulated", "measured", "predicted"]),
        "stream_id": _opt(st.integers(0, 2**20)),
        "device_start_ns": _opt(st.integers(-(2**62), 2**62)),
        "device_duration_ns": _opt(st.integers(0, 2**40)),
        "kernel_id": _opt(st.integers(0, 3)),
        "grid_x": _opt(st.integers(0, 2**31 - 1)),
        "gemm_m": _opt(st.integers(0, 2**40)),
        "collective_name": _opt(st.text(max_size=12)),
        "args": _opt(st.text(max_size=20)),
    }
)
_op_row = st.fixed_dictionaries(
    {
        "parent_op_id": _opt(st.integers(0, 100)),
        "name": st.text(min_size=1, max_size=20),
        "thread_id": _opt(st.integers(0, 2**22)),
        "start_ns": st.integers(0, 2**50),
        "end_ns": _opt(st.integers(0, 2**51)),
        "input_shapes": _opt(st.lists(st.lists(st.integers(0, 2**20), max_size=3), max_size=3)),
        "phase": _opt(st.sampled_from(["forward", "backward", "optimizer", "other"])),
    }
)
_mem_row = st.fixed_dictionaries(
    {
        "ts_ns": st.integers(0, 2**50),
        "kind": st.sampled_from(["alloc", "free", "oom"]),
        "bytes": st.integers(0, 2**40),
        "allocated_bytes": _opt(st.integers(0, 2**40)),
    }
)
_rank = st.tuples(
    st.lists(_api_row, max_size=15), st.lists(_op_row, max_size=6), st.lists(_mem_row, max_size=4), st.booleans()
)


def _columns(rows: list[dict], **extra) -> dict:
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols.update(extra)
    return cols


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_rank, min_size=1, max_size=3))
@pytest.mark.slow
def test_any_run_exports_valid_json(ranks):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        w = RunWriter(run_dir)
        w.write(
            "run",
            {
                "run_id": ["h"],
                "created_at_ns": [0],
                "source": ["synthetic"],
                "status": ["running"],
                "world_size": [len(ranks)],
            },
        )
        for rank, (calls, ops, mem, with_kernels) in enumerate(ranks):
            if with_kernels:
                w.write("kernels", {"kernel_id": [0, 1], "name": ["k0", "k1"]}, rank=rank)
                w.write("devices", {"device_index": [rank], "device_name": [f"gpu{rank}"]}, rank=rank)
            if calls:
                w.write("api_calls", _columns(calls, seq=list(range(len(calls)))), rank=rank)
            if ops:
                w.write("ops", _columns(ops, op_id=list(range(len(ops)))), rank=rank)
            if mem:
                w.write("memory_events", _columns(mem, seq=list(range(len(mem)))), rank=rank)
        out = Path(tmp) / "trace.json"
        stats = export_perfetto(run_dir, out)
        with open(out) as fh:
            doc = json.load(fh)
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert len(xs) == stats.slices == expected_x(run_dir)
        assert stats.counters == sum(r["allocated_bytes"] is not None for _, _, mem, _ in ranks for r in mem)
        assert all(e["dur"] >= 0 for e in xs)
        assert {e["pid"] for e in doc["traceEvents"]} <= set(range(len(ranks)))


def test_not_a_run(tmp_path):
    with pytest.raises(TraceError):
        export_perfetto(tmp_path, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
