"""Kineto -> campaign trace: a recorded-style CUDA Kineto trace of a profiled chunk (fixture shaped like
torch 2.x output on an H100: cuBLASLt launches through the driver API, backward ops on autograd's
device thread, a pinned host-to-device copy, warm-up and set-up work outside the annotations)."""

import json

import pytest
from paths import FIXTURES

from maya.profiler.device_info import DeviceInfo
from maya.profiler.kernels.campaign_store import CampaignStore, read_measurements
from maya.profiler.kernels.configs import KernelConfig
from maya.profiler.kernels.measurements import measurement_row
from maya.profiler.kernels.results import Samples, Timing
from maya.profiler.kernels.trace_merge import IdCounters, convert_chunk
from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run

FIXTURE = FIXTURES / "profiler" / "kineto_chunk_h100.json"
LINEAR = KernelConfig.make("linear", "bf16", m=256, k=512, n=1024)
LAYER_NORM_BWD = KernelConfig.make("layer_norm_bwd", "bf16", tokens=256, hidden=1024)
COPY = KernelConfig.make("memcpy_h2d", "u8", bytes=4096, pinned=1)
CONFIGS = (LINEAR, LAYER_NORM_BWD, COPY)
NVJET = "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", 0, 9, 0, 132, 85029158912, 52428800, "h100-lent")


def convert(ids: IdCounters = IdCounters()):
    return convert_chunk(FIXTURE, ids, {c.key: c.to_json() for c in CONFIGS})


def test_fixture_names_the_configs():
    names = {e["name"] for e in json.loads(FIXTURE.read_text())["traceEvents"]}
    assert {f"maya.config:{c.key}" for c in CONFIGS} <= names


def test_calls_and_kernels_are_cut_into_configs_and_repeats():
    chunk = convert()
    calls = chunk.tables["api_calls"]
    assert [(c["api"], json.loads(c["args"])["config_key"], json.loads(c["args"])["repeat"]) for c in calls] == [
        ("cuLaunchKernelEx", LINEAR.key, 0),
        ("cuLaunchKernelEx", LINEAR.key, 1),
        ("cudaLaunchKernel", LAYER_NORM_BWD.key, 0),
        ("cudaLaunchKernel", LAYER_NORM_BWD.key, 0),
        ("cudaLaunchKernel", LAYER_NORM_BWD.key, 1),
        ("cudaLaunchKernel", LAYER_NORM_BWD.key, 1),
        ("cudaMemcpyAsync", COPY.key, 0),
        ("cudaMemcpyAsync", COPY.key, 1),
    ]
    # warm-up launches, set-up forward passes and synchronisations outside the annotations are gone
    assert all(c["api"] != "cudaDeviceSynchronize" for c in calls)
    assert json.loads(calls[0]["args"])["config"] == json.loads(LINEAR.to_json())
    first = calls[0]
    assert (
        first["device_duration_ns"],
        first["grid_x"],
        first["block_x"],
        first["registers_per_thread"],
        first["shared_mem_bytes"],
        first["time_source"],
    ) == (4448, 16, 384, 168, 133120, "measured")
    assert [c["memcpy_kind"] for c in calls[-2:]] == ["HtoD", "HtoD"]
    assert [c["bytes"] for c in calls[-2:]] == [4096, 4096]


def test_ops_keep_shapes_and_nest_under_the_annotations():
    ops = {o["op_id"]: o for o in convert().tables["ops"]}
    by_name = {}
    for o in ops.values():
        by_name.setdefault(o["name"], []).append(o)
    assert len(by_name[f"maya.config:{LINEAR.key}"]) == 1
    mm = by_name["aten::mm"]
    assert len(mm) == 2  # the two profiled repeats; the warm-up mm is dropped
    assert mm[0]["input_shapes"] == [[256, 512], [512, 1024]]
    assert mm[0]["input_dtypes"] == ["c10::BFloat16", "c10::BFloat16"]
    assert ops[ops[mm[0]["parent_op_id"]]["parent_op_id"]]["name"] == "maya.repeat:0"
    backward = by_name["aten::native_layer_norm_backward"]
    assert [o["phase"] for o in backward] == ["backward", "backward"]  # autograd's device thread
    assert "aten::native_layer_norm" not in by_name  # set-up forward pass
    assert len(ops) == 27


def test_kernel_stats_per_config():
    stats = convert().stats
    assert stats[LINEAR.key].kernel_ns == 4480  # median of 4448 and 4512
    assert stats[LINEAR.key].kernel_names == [NVJET]
    assert stats[LAYER_NORM_BWD.key].kernel_ns == 8750  # median of 3200+5600, 3300+5400
    assert [n.split("<")[0] for n in stats[LAYER_NORM_BWD.key].kernel_names] == [
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate",
    ]
    assert (stats[COPY.key].kernel_ns, stats[COPY.key].kernel_names) == (1200, ["Memcpy HtoD"])


def test_ids_continue_the_campaign():
    chunk = convert(IdCounters(next_seq=100, next_op_id=50, kernel_ids={NVJET: 7, "other_kernel": 8}))
    calls, ops = chunk.tables["api_calls"], chunk.tables["ops"]
    assert [c["seq"] for c in calls] == list(range(100, 108))
    assert sorted(o["op_id"] for o in ops) == list(range(50, 77))
    op_ids = {o["op_id"] for o in ops}
    assert all(o["parent_op_id"] in op_ids for o in ops if o["parent_op_id"] is not None)
    assert all(c["op_id"] in op_ids for c in calls)
    assert [c["kernel_id"] for c in calls[:6]] == [7, 7, 9, 10, 9, 10]  # known name keeps its id
    assert [(k["kernel_id"], k["family"]) for k in chunk.tables["kernels"]] == [
        (9, "normalization"),
        (10, "normalization"),
    ]
    assert (chunk.ids.next_seq, chunk.ids.next_op_id, chunk.ids.kernel_ids[NVJET]) == (108, 77, 7)


def _rows(chunk, session="s1"):
    samples = Samples([1000, 1100, 1200], [30000, 31000, 32000], gpu_bound=True)
    return [
        measurement_row(
            Timing(c, "ok", 1 << 20, 4, samples),
            chunk.stats.get(c.key),
            hardware="h100-sxm",
            device_name=H100.name,
            session_id=session,
            measured_at_ns=1,
        )
        for c in CONFIGS
    ]


@pytest.mark.slow
def test_chunks_append_to_a_valid_measured_run(tmp_path):
    store = CampaignStore(tmp_path / "campaign")
    store.start_session(
        H100, "h100-sxm", {"id": "s1", "pid": 1, "command": ["test"]}, framework="torch 2.11.0", cuda_version="13.0"
    )
    first = convert(store.ids)
    store.append(first, _rows(first))
    second = convert(store.ids)  # the same kernels measured again in a later chunk
    store.append(second, _rows(second))
    store.end_session(stop_reason="complete")
    trace = tmp_path / "campaign" / "trace"
    assert validate_run(trace) == []
    run = Run(trace)
    assert (run.info["source"], run.info["status"], run.info["hardware"]) == ("profiler", "complete", "h100-sxm")
    assert run.table("kernels").num_rows == 3  # names are registered once
    assert run.table("api_calls").column("seq").to_pylist() == list(range(16))
    devices = run.table("devices").to_pylist()
    assert (devices[0]["device_name"], devices[0]["sm_count"], devices[0]["memory_bytes"]) == (
        H100.name,
        132,
        85029158912,
    )
    rows = read_measurements(tmp_path / "campaign").to_pylist()
    assert len(rows) == 6
    linear = next(r for r in rows if r["config_key"] == LINEAR.key)
    assert (linear["family"], linear["op"], linear["m"], linear["n"], linear["k"], linear["tokens"]) == (
        "gemm",
        "linear",
        256,
        1024,
        512,
        None,
    )
    assert (linear["median_ns"], linear["p10_ns"], linear["p90_ns"], linear["host_median_ns"]) == (
        1100,
        1020,
        1180,
        31000,
    )
    assert (linear["kernel_ns"], linear["n_kernels"], linear["kernel_names"]) == (4480, 1, [NVJET])
    # a resumed store continues the ids where the files end
    resumed = CampaignStore(tmp_path / "campaign")
    resumed.start_session(H100, "h100-sxm", {"id": "s2"}, framework="torch 2.11.0", cuda_version="13.0")
    assert (resumed.ids.next_seq, resumed.ids.next_op_id, len(resumed.ids.kernel_ids)) == (16, 54, 3)
    assert resumed.done_keys() == {c.key for c in CONFIGS}
    assert [s["id"] for s in json.loads(Run(trace).info["attrs"])["sessions"]] == ["s1", "s2"]


def test_a_campaign_stays_on_its_device(tmp_path):
    from maya.profiler.kernels.campaign_store import CampaignMismatch

    store = CampaignStore(tmp_path)
    store.start_session(H100, None, {"id": "s1"}, framework="torch", cuda_version=None)
    other = DeviceInfo("NVIDIA H200", 0, 9, 0, 132, 150754820096, 62914560, "h200-lent")
    with pytest.raises(CampaignMismatch, match="NVIDIA H200"):
        CampaignStore(tmp_path).start_session(other, None, {"id": "s2"}, framework="torch", cuda_version=None)
