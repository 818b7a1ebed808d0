"""Importing torch.profiler / Kineto Chrome traces: a real CPU trace, a hand-checked GPU-shaped
fixture, bad input and gzip."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import tree_digest
from paths import FIXTURES

from maya_trace_spec import Run, read_table
from maya_trace_spec.interop.kineto import KinetoFormatError, import_kineto
from maya_trace_spec.validation import validate_run

FIXTURE = FIXTURES / "kineto_gpu_small.json"
B = 1_700_000_000_000_000_000  # the fixture's baseTimeNanoseconds


def ns(us: float) -> int:
    """Fixture microseconds (three decimals) as absolute ns."""
    return B + round(us * 1000)


def rows(run_dir, name):
    return read_table(run_dir, name).to_pylist()


# ------------------------------------------------------------------ a real torch.profiler trace

BATCH, D_IN, D_HIDDEN, D_OUT = 8, 16, 32, 4


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory) -> Path:
    """A CPU trace of 5 AdamW training steps of a 2-layer MLP; steps 2..4 are recorded."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path_factory.mktemp("kineto") / "trace.json"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HIDDEN), torch.nn.ReLU(), torch.nn.Linear(D_HIDDEN, D_OUT))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, D_IN), torch.randn(BATCH, D_OUT)
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(5):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return path


@pytest.mark.slow
def test_real_cpu_trace(real_trace, tmp_path):
    events = json.loads(real_trace.read_text())["traceEvents"]
    out = import_kineto([real_trace], tmp_path / "run")
    assert validate_run(out) == []

    run = Run(out).info
    assert (run["source"], run["status"], run["world_size"], run["command"]) == ("kineto-import", "complete", 1, None)
    assert json.loads(run["attrs"])["source_files"][0]["path"] == str(real_trace)

    ops = rows(out, "ops")
    by_id = {o["op_id"]: o for o in ops}
    n_ops = sum(e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") for e in events)
    assert len(ops) == n_ops and [o["op_id"] for o in ops] == list(range(n_ops))
    assert {o["time_source"] for o in ops} == {"measured"}

    # shapes as recorded: aten::linear(input, weight, bias) and aten::addmm(bias, input, weight.t())
    linear = [o for o in ops if o["name"] == "aten::linear"]
    assert {tuple(map(tuple, o["input_shapes"])) for o in linear} == {
        ((BATCH, D_IN), (D_HIDDEN, D_IN), (D_HIDDEN,)),
        ((BATCH, D_HIDDEN), (D_OUT, D_HIDDEN), (D_OUT,)),
    }
    assert len(linear) == 6 and {o["phase"] for o in linear} == {"forward"}
    addmm = [o for o in ops if o["name"] == "aten::addmm"]
    assert [[D_HIDDEN], [BATCH, D_IN], [D_IN, D_HIDDEN], [], []] in [o["input_shapes"] for o in addmm]
    assert addmm[0]["input_dtypes"] == ["float", "float", "float", "Scalar", "Scalar"]
    assert all(by_id[o["parent_op_id"]]["name"] == "aten::linear" for o in addmm)

    # iterations are the N of ProfilerStep#N; the steps themselves are roots
    steps = {o["name"]: o for o in ops if o["name"].startswith("ProfilerStep#")}
    assert sorted(steps) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert all(s["parent_op_id"] is None and s["phase"] == "other" for s in steps.values())
    assert {o["iteration"] for o in ops} == {2, 3, 4}
    for o in ops:
        step = steps[f"ProfilerStep#{o['iteration']}"]
        assert step["start_ns"] <= o["start_ns"] < step["end_ns"]

    def ancestors(o):
        while o["parent_op_id"] is not None:
            o = by_id[o["parent_op_id"]]
            yield o["name"]

    for o in ops:
        names = [o["name"], *ancestors(o)]
        if any(n.startswith("autograd::engine::evaluate_function") for n in names):
            assert o["phase"] == "backward", o
        elif any(n.startswith(("Optimizer.step", "Optimizer.zero_grad")) for n in names):
            assert o["phase"] == "optimizer", o
    backward = {o["name"] for o in ops if o["phase"] == "backward"}
    assert {"AddmmBackward0", "aten::mm", "torch::autograd::AccumulateGrad"} <= backward
    assert {"aten::addcdiv_", "aten::lerp_", "Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad"} <= {
        o["name"] for o in ops if o["phase"] == "optimizer"
    }
    # backward ops carry the sequence number of their forward op
    seq_fwd = {o["seq_nr"] for o in addmm}
    assert seq_fwd and seq_fwd <= {o["seq_nr"] for o in ops if o["name"] == "AddmmBackward0"}

    # CPU memory events, each inside an op
    mem = rows(out, "memory_events")
    assert len(mem) == sum(e.get("name") == "[memory]" for e in events) > 0
    assert [m["seq"] for m in mem] == list(range(len(mem)))
    assert {m["space"] for m in mem} == {"host"} and {m["kind"] for m in mem} == {"alloc", "free"}
    assert all(m["bytes"] > 0 and m["device"] is None for m in mem)
    assert all(m["op_id"] in by_id for m in mem)

    # no device activity in a CPU trace
    assert rows(out, "api_calls") == [] and rows(out, "kernels") == []
    assert rows(out, "devices") == [
        {
            "rank": 0,
            "local_rank": None,
            "node": None,
            "device_index": 0,
            "device_name": None,
            "hardware": None,
            "sm_major": None,
            "sm_minor": None,
            "sm_count": None,
            "memory_bytes": None,
            "represents": None,
            "hostname": json.loads(real_trace.read_text()).get("host_name"),
            "pid": ops[0]["thread_id"],
        }
    ]


# ------------------------------------------------------------------ the hand-written GPU fixture


@pytest.fixture
def gpu_run(tmp_path) -> Path:
    return import_kineto([FIXTURE], tmp_path / "run", hardware="h100-sxm")


def test_fixture_run_and_device(gpu_run):
    assert validate_run(gpu_run) == []
    run = Run(gpu_run)
    assert run.ranks == [1]  # from distributedInfo, not the file's position
    info = run.info
    assert {
        k: info[k] for k in ("source", "status", "command", "hardware", "world_size", "framework", "cuda_version")
    } == {
        "source": "kineto-import",
        "status": "complete",
        "command": None,
        "hardware": "h100-sxm",
        "world_size": 2,
        "framework": None,
        "cuda_version": "12.8",
    }
    [source] = json.loads(info["attrs"])["source_files"]
    assert source["path"] == str(FIXTURE) and source["rank"] == 1
    assert source["metadata"]["schemaVersion"] == 1
    assert source["metadata"]["trace_id"] == "5C1A3E0B5A4F4E27B1C9D2F3A4B5C6D7"
    assert "traceEvents" not in source["metadata"]
    assert rows(gpu_run, "devices") == [
        {
            "rank": 1,
            "local_rank": None,
            "node": None,
            "device_index": 1,
            "device_name": "NVIDIA H100 80GB HBM3",
            "hardware": "h100-sxm",
            "sm_major": 9,
            "sm_minor": 0,
            "sm_count": 132,
            "memory_bytes": 85029158912,
            "represents": None,
            "hostname": "node-a",
            "pid": 4242,
        }
    ]


def test_fixture_ops(gpu_run):
    def op(op_id, parent, name, start, end, shapes=None, dtypes=None, phase="forward", seq_nr=None, thread=4242):
        return {
            "rank": 1,
            "op_id": op_id,
            "parent_op_id": parent,
            "name": name,
            "thread_id": thread,
            "start_ns": ns(start),
            "end_ns": ns(end),
            "time_source": "measured",
            "input_shapes": shapes,
            "input_dtypes": dtypes,
            "module_path": None,
            "phase": phase,
            "iteration": 5,
            "seq_nr": seq_nr,
        }

    adamw_types = ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""]
    assert rows(gpu_run, "ops") == [
        op(0, None, "ProfilerStep#5", 1000, 1900, phase="other"),
        op(1, 0, "aten::mm", 1010.5, 1050.75, [[128, 256], [256, 512]], ["float", "float"], seq_nr=17),
        op(2, 0, "aten::copy_", 1100, 1130, [[1024], [1024], []], ["float", "float", "Scalar"]),
        op(3, 0, "record_param_comms", 1200, 1220, [[1048576]], ["float"]),
        op(4, 3, "nccl:all_reduce", 1201, 1219),
        op(5, 0, "aten::add", 1590, 1610, [[1024], [1024], []], ["float", "float", "Scalar"], seq_nr=18),
        # on the autograd thread: backward, and in step 5 although not nested in it
        op(
            6, None, "aten::mm", 1700, 1710, [[256, 128], [128, 512]], ["float", "float"], phase="backward", thread=4300
        ),
        op(7, 0, "Optimizer.step#AdamW.step", 1800, 1850, phase="optimizer"),
        # TensorList inputs are not one tensor: empty shapes
        op(8, 7, "aten::_fused_adamw_", 1805, 1825, [[]] * 15, adamw_types, phase="optimizer"),
    ]


def test_fixture_api_calls(gpu_run):
    null = dict.fromkeys(
        [
            "status",
            "cpu_start_ns",
            "cpu_duration_ns",
            "device",
            "stream_id",
            "device_start_ns",
            "device_duration_ns",
            "kernel_id",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "shared_mem_bytes",
            "registers_per_thread",
            "gemm_m",
            "gemm_n",
            "gemm_k",
            "gemm_batch",
            "gemm_trans_a",
            "gemm_trans_b",
            "gemm_dtype_a",
            "gemm_dtype_b",
            "gemm_dtype_c",
            "gemm_compute_type",
            "bytes",
            "memcpy_kind",
            "comm_id",
            "collective_name",
            "in_msg_nelems",
            "out_msg_nelems",
            "comm_dtype",
            "root_rank",
            "peer_rank",
            "comm_seq",
            "event_id",
            "data_dependent",
            "args",
        ]
    )

    def call(seq, api, start, dur, corr, op_id, domain="runtime", thread=4242, **fields):
        return {
            "rank": 1,
            "seq": seq,
            "thread_id": thread,
            "api": api,
            "domain": domain,
            "start_ns": start,
            "duration_ns": dur,
            "time_source": "measured",
            "correlation_id": corr,
            "op_id": op_id,
            **null,
            **fields,
        }

    assert rows(gpu_run, "api_calls") == [
        call(
            0,
            "cudaLaunchKernel",
            ns(1020.125),
            6500,
            101,
            1,
            device=1,
            stream_id=7,
            device_start_ns=ns(1030),
            device_duration_ns=55125,
            kernel_id=0,
            grid_x=8,
            grid_y=4,
            grid_z=1,
            block_x=256,
            block_y=1,
            block_z=1,
            shared_mem_bytes=16384,
            registers_per_thread=122,
        ),
        call(
            1,
            "cudaMemcpyAsync",
            ns(1105.25),
            12000,
            102,
            2,
            device=1,
            stream_id=7,
            device_start_ns=ns(1120),
            device_duration_ns=2500,
            bytes=4096,
            memcpy_kind="HtoD",
        ),
        # External id 4 names record_param_comms, not the innermost nccl:all_reduce annotation
        call(
            2,
            "cudaLaunchKernel",
            ns(1205),
            5000,
            103,
            3,
            device=1,
            stream_id=20,
            device_start_ns=ns(1230),
            device_duration_ns=80000,
            kernel_id=1,
            grid_x=2,
            grid_y=1,
            grid_z=1,
            block_x=640,
            block_y=1,
            block_z=1,
            shared_mem_bytes=0,
            registers_per_thread=96,
            comm_id="pg:0",
            collective_name="allreduce",
            in_msg_nelems=1048576,
            out_msg_nelems=1048576,
            comm_dtype="Float",
            comm_seq=3,
        ),
        # device work whose call is not in the trace
        call(
            3,
            "memset",
            ns(1400),
            None,
            999,
            None,
            domain="device",
            thread=None,
            device=1,
            stream_id=7,
            device_start_ns=ns(1400),
            device_duration_ns=1500,
            bytes=512,
        ),
        # no External id: the innermost enclosing op on its thread
        call(4, "cudaStreamSynchronize", ns(1500), 60000, 105, 0),
        call(
            5,
            "cuLaunchKernel",
            ns(1600),
            4000,
            104,
            5,
            domain="driver",
            device=1,
            stream_id=7,
            device_start_ns=ns(1650),
            device_duration_ns=3250,
            kernel_id=2,
            grid_x=4,
            grid_y=1,
            grid_z=1,
            block_x=256,
            block_y=1,
            block_z=1,
            shared_mem_bytes=0,
            registers_per_thread=16,
        ),
    ]


def test_fixture_kernels_communicators_memory(gpu_run):
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    assert rows(gpu_run, "kernels") == [
        {
            "rank": 1,
            "kernel_id": 0,
            "name": "ampere_sgemm_128x64_nn",
            "demangled": "ampere_sgemm_128x64_nn",
            "family": "gemm",
            "library": "cublas",
        },
        {"rank": 1, "kernel_id": 1, "name": nccl, "demangled": nccl, "family": "collective", "library": "nccl"},
        {
            "rank": 1,
            "kernel_id": 2,
            "name": "triton_poi_fused_add_0",
            "demangled": "triton_poi_fused_add_0",
            "family": "elementwise",
            "library": "triton",
        },
    ]
    assert rows(gpu_run, "communicators") == [
        {
            "rank": 1,
            "comm_id": "pg:0",
            "comm_rank": 1,
            "comm_size": 2,
            "pg_name": "0",
            "pg_desc": "default_pg",
            "ranks": [0, 1],
            "device": 1,
        }
    ]
    mem = {"rank": 1, "stream_id": None, "api_seq": None}
    assert rows(gpu_run, "memory_events") == [
        {
            **mem,
            "seq": 0,
            "ts_ns": ns(1015),
            "kind": "alloc",
            "space": "device",
            "address": 139872110264320,
            "bytes": 262144,
            "device": 1,
            "allocated_bytes": 262144,
            "op_id": 1,
        },
        {
            **mem,
            "seq": 1,
            "ts_ns": ns(1101),
            "kind": "alloc",
            "space": "host",
            "address": 94254302813632,
            "bytes": 4096,
            "device": None,
            "allocated_bytes": 4096,
            "op_id": 2,
        },
        {
            **mem,
            "seq": 2,
            "ts_ns": ns(1950),
            "kind": "free",
            "space": "device",
            "address": 139872110264320,
            "bytes": 262144,
            "device": 1,
            "allocated_bytes": 0,
            "op_id": None,
        },
    ]


@pytest.mark.slow
def test_ranks_from_argument_and_position(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    del doc["distributedInfo"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc))
    b.write_text(json.dumps(doc))
    assert Run(import_kineto([a, b], tmp_path / "pos")).ranks == [0, 1]
    out = import_kineto([a, b], tmp_path / "arg", ranks=[3, 1])
    assert Run(out).ranks == [1, 3] and Run(out).info["world_size"] == 4
    assert validate_run(out) == []
    with pytest.raises(KinetoFormatError, match="rank 1 is also the rank of"):
        import_kineto([FIXTURE, b], tmp_path / "dup", ranks=[0, 1])
    assert not (tmp_path / "dup").exists()


def test_p2p_oom_second_work_and_framework(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["torch_version"] = "2.5.1+cu124"
    events = doc["traceEvents"]
    for e in events:
        if e["name"] == "record_param_comms" or e["name"].startswith("ncclDevKernel_"):
            e["args"].update({"Collective name": "send", "Dst Rank": 0})
    kernel = next(e for e in events if e["name"] == "ampere_sgemm_128x64_nn")
    events.append({**kernel, "ts": 1090.0, "dur": 1.0, "name": "void at::native::reduce_kernel<512, 1>"})
    events.append(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[OutOfMemory]",
            "pid": 4242,
            "tid": 4242,
            "ts": 1040.0,
            "args": {
                "Total Reserved": 2097152,
                "Total Allocated": 262144,
                "Bytes": 8589934592,
                "Device Id": 1,
                "Device Type": 1,
            },
        }
    )
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    out = import_kineto([path], tmp_path / "run")
    assert validate_run(out) == []
    assert Run(out).info["framework"] == "torch 2.5.1+cu124"
    calls = rows(out, "api_calls")
    [send] = [c for c in calls if c["collective_name"] is not None]
    assert (send["collective_name"], send["peer_rank"], send["comm_id"]) == ("send", 0, "pg:0")
    # a second piece of work of one call (as in a graph launch) gets a device row of its own
    [extra] = [c for c in calls if c["start_ns"] == ns(1090)]
    assert {
        k: extra[k]
        for k in ("api", "domain", "correlation_id", "op_id", "kernel_id", "device_start_ns", "device_duration_ns")
    } == {
        "api": "kernel",
        "domain": "device",
        "correlation_id": 101,
        "op_id": 1,
        "kernel_id": 1,
        "device_start_ns": ns(1090),
        "device_duration_ns": 1000,
    }
    assert rows(out, "kernels")[1]["family"] == "reduction"
    [oom] = [m for m in rows(out, "memory_events") if m["kind"] == "oom"]
    assert (oom["bytes"], oom["space"], oom["device"], oom["op_id"], oom["address"]) == (
        8589934592,
        "device",
        1,
        1,
        None,
    )


# ------------------------------------------------------------------ bad input

BAD = {
    "not_json": ("{ this is not json", "not JSON"),
    "json_list": ("[1, 2, 3]", "not a Kineto/Chrome trace: no traceEvents list"),
    "no_trace_events": ('{"schemaVersion": 1}', "not a Kineto/Chrome trace: no traceEvents list"),
    "events_not_list": ('{"traceEvents": {}}', "not a Kineto/Chrome trace: no traceEvents list"),
    "event_not_object": ('{"traceEvents": [3]}', r"traceEvents\[0\] is not an object"),
    "event_without_ph": (
        '{"traceEvents": [{"ph": "M", "name": "a"}, {"name": "x", "ts": 1}]}',
        r"traceEvents\[1\] has no 'ph'",
    ),
    "event_without_name": ('{"traceEvents": [{"ph": "X", "ts": 1}]}', r"traceEvents\[0\] has no 'name'"),
    "string_ts": ('{"traceEvents": [{"ph": "X", "name": "x", "cat": "cpu_op", "ts": "12"}]}', "non-numeric ts"),
    "op_without_ts": ('{"traceEvents": [{"ph": "X", "name": "x", "cat": "cpu_op", "dur": 1}]}', "has no ts"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("out_exists", [False, True])
def test_bad_input_raises_and_writes_nothing(tmp_path, case, out_exists):
    content, message = BAD[case]
    bad = tmp_path / f"{case}.json"
    bad.write_text(content)
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    # the good file comes first: nothing may be written before every file is read
    with pytest.raises(KinetoFormatError, match=message) as err:
        import_kineto([FIXTURE, bad], out, ranks=[1, 0])
    assert err.value.path == str(bad) and str(bad) in str(err.value)
    assert out.exists() == out_exists and (not out_exists or list(out.iterdir()) == [])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([bad.name] + ["out"] * out_exists)


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(KinetoFormatError, match="no such file") as err:
        import_kineto([missing], tmp_path / "out")
    assert str(missing) in str(err.value) and not (tmp_path / "out").exists()


def test_nonempty_output_is_refused(gpu_run, tmp_path):
    before = tree_digest(gpu_run)
    with pytest.raises(FileExistsError):
        import_kineto([FIXTURE], gpu_run)
    assert tree_digest(gpu_run) == before


# ------------------------------------------------------------------ gzip


@pytest.mark.slow
def test_gzip_input(gpu_run, tmp_path):
    gz = tmp_path / "rank1.pt.trace.json.gz"
    with open(FIXTURE, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    (tmp_path / "from_gz").mkdir()  # an existing empty directory is fine
    out = import_kineto([gz], tmp_path / "from_gz", hardware="h100-sxm")
    assert validate_run(out) == []
    for name in ("devices", "ops", "api_calls", "kernels", "communicators", "memory_events"):
        assert read_table(out, name).equals(read_table(gpu_run, name)), name
    assert json.loads(Run(out).info["attrs"])["source_files"][0]["path"] == str(gz)


def test_damaged_gzip(tmp_path):
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes())[:200])
    with pytest.raises(KinetoFormatError, match="damaged gzip") as err:
        import_kineto([gz], tmp_path / "out")
    assert str(gz) in str(err.value) and not (tmp_path / "out").exists()
