"""Trace-driven replay of measured traces and what-if re-targeting: the replay's error against the measured
iteration time, another GPU (kernels re-priced), another data-parallel degree and another cluster."""

import json
from pathlib import Path

import pytest
import typer
from paths import FIXTURES
from typer.testing import CliRunner

from maya.cli.predict import predict_cmd
from maya.core import hardware
from maya.simulator import MeasuredDurations, RooflineDurations, predict, simulate
from maya.simulator.retarget import data_parallel, with_nodes
from maya.simulator.trace import load
from maya.simulator.trace_builder import TraceBuilder
from maya_trace_spec.interop.kineto import import_kineto

FIXTURE = FIXTURES / "kineto_gpu_small.json"
US = 1_000
runner = CliRunner()
predict_app = typer.Typer()
predict_app.command()(predict_cmd)


@pytest.fixture
def measured_run(tmp_path) -> Path:
    """Both ranks of the hand-checked Kineto fixture (rank 0 a copy of rank 1), measured on an H100."""
    rank0 = json.loads(FIXTURE.read_text())
    rank0["distributedInfo"]["rank"] = 0
    (tmp_path / "rank0.json").write_text(json.dumps(rank0))
    return import_kineto([tmp_path / "rank0.json", FIXTURE], tmp_path / "run", hardware="h100-sxm")


@pytest.mark.slow
def test_measured_replay_reports_its_error_against_the_measured_iteration(measured_run):
    """Hand-checked: the measured iteration runs from the first call (1020.125 us) to the end of the last
    kernel (1650 + 3.25 us). The replay issues each call after its measured host gap and own time, starts its
    work after its measured launch delay (the last kernel 46 us after its call returned at 1604 us), and the
    stream synchronisation at 1500 us keeps its 60 us (the work it waits for ended at 1401.5 us): the replay
    reproduces the measured timeline."""
    prediction = predict(measured_run)
    assert prediction.durations == "measured"
    assert prediction.measured_iteration_ns == 633_125
    assert prediction.iteration_ns == 633_125
    assert prediction.replay_error == 0.0
    assert prediction.assumptions == []
    sim = simulate(load(measured_run), hardware.get("h100-sxm"), MeasuredDurations())
    # kernel 1030 - 1026.625; copy 1120 - 1117.25; NCCL kernel 1230 - 1210; memset (no call); sync; last kernel
    assert sim.programs[0].ready.tolist() == [3_375, 2_750, 20_000, 0, 0, 46_000]


def test_queued_work_gets_the_typical_launch_delay():
    """Work that started when earlier work on its stream ended was held by the queue, not by its launch."""
    import pandas as pd

    from maya.simulator.opcodes import NOP, WORK

    calls = pd.DataFrame(
        {
            "opcode": [WORK, WORK, WORK, WORK, NOP],
            "domain": ["runtime"] * 5,
            "stream_id": [7, 7, 7, 8, 7],
            "start_ns": [0, 10, 20, 30, 40],
            "duration_ns": [5, 5, 5, 5, 5],
            "device_start_ns": pd.array([8, 100, 200, 45, None], dtype="Int64"),
            "device_duration_ns": [92, 100, 10, 10, None],
        }
    )
    # idle starts: 8 - 5 = 3 (stream 7), 45 - 35 = 10 (stream 8); queued: the 2nd and 3rd on stream 7
    assert MeasuredDurations().launch_ns(calls).tolist() == [3, 6.5, 6.5, 10, 0]


@pytest.mark.slow
def test_another_gpu_scales_measured_kernels_by_the_estimates(measured_run):
    """Without a registered estimator version the roofline prices both GPUs; the GEMM's shape comes from
    its aten::mm inputs ([128, 256] x [256, 512], fp32)."""
    h100, a100 = hardware.get("h100-sxm"), hardware.get("a100-sxm-80gb")
    roofline = RooflineDurations()
    flops, traffic = 2 * 128 * 512 * 256, 4 * (128 * 256 + 256 * 512 + 128 * 512)

    def gemm_ns(hw):
        return (
            max(
                flops / (hw.peak_flops("fp32") * roofline.compute_efficiency),
                traffic / (hw.memory_bandwidth * roofline.memory_efficiency),
            )
            * 1e9
            + roofline.kernel_overhead_ns
        )

    traces = load(measured_run)
    from maya.simulator.simulation import make_provider

    provider, notes = make_provider("auto", traces, a100)
    sim = simulate(traces, a100, provider)
    device = sim.devices[0]
    assert device[0] == round(55_125 * gemm_ns(a100) / gemm_ns(h100))
    assert device[2] == 80_000  # the all-reduce: same GPUs per node, same degree: as measured
    prediction = predict(measured_run, hardware="a100-sxm-80gb")
    assert prediction.replay_error is None and prediction.measured_iteration_ns == 633_125
    assert any(a.startswith("GPU: a100-sxm-80gb instead of h100-sxm") for a in prediction.assumptions)
    assert any("roofline" in n for n in prediction.notes)


def ddp_trace(tmp_path, world: int = 2, *, nproc_per_node: int | None = None) -> Path:
    b = TraceBuilder(world, nproc_per_node=nproc_per_node)
    b.communicator("dp", list(range(world)))
    for r in range(world):
        k = b.rank(r)
        k.kernel(100 * US)
        k.allreduce("dp", 30 * US, nelems=1 << 26)
        k.stream_sync()
    return b.write(tmp_path / f"ddp{world}")


@pytest.mark.slow
def test_data_parallel_degree_spans_every_rank_and_reprices_the_collective(tmp_path):
    run = ddp_trace(tmp_path)
    prediction = predict(run, dp=16, durations="roofline")
    assert (prediction.world_size, prediction.simulated_ranks, prediction.captured_ranks) == (16, 16, 2)
    assert prediction.assumptions == [  # laid out on the nodes of the H100's cluster, dgx-h100
        "ranks laid out 8 per node instead of 2",
        "data-parallel degree 16 instead of 2 (2 node(s) of 8 GPUs): same per-GPU batch and work, each rank "
        "replays the program of a traced rank; the job-wide collectives span 16 ranks and are re-priced",
    ]
    traces = data_parallel(with_nodes(load(run), 8), 16)
    assert {r: t.represents for r, t in traces.ranks.items()} == {0: list(range(0, 16, 2)), 1: list(range(1, 16, 2))}
    sim = simulate(traces, hardware.get("h100-sxm"), RooflineDurations())
    assert [(c.members, c.nodes) for c in sim.comms] == [(tuple(range(16)), 2)]
    one = simulate(load(run), hardware.get("h100-sxm"), RooflineDurations())
    assert sim.devices[0][1] > one.devices[0][1] > 0  # 16 ranks on 2 nodes: a slower all-reduce than 2 on 1


@pytest.mark.slow
def test_measured_collectives_are_repriced_for_the_new_degree(tmp_path):
    run = ddp_trace(tmp_path)
    same = predict(run)
    assert same.durations == "measured" and same.measured_iteration_ns is None  # no device start times
    wider = predict(run, dp=64)
    assert wider.durations == "measured (collectives by collective model)"
    assert wider.replay_error is None and wider.world_size == 64
    sim = simulate(data_parallel(load(run), 64), hardware.get("h100-sxm"), MeasuredDurations())
    assert sim.devices[0][0] == 100 * US  # kernels keep their measured time


@pytest.mark.slow
def test_cluster_lays_the_ranks_on_its_nodes(tmp_path):
    run = ddp_trace(tmp_path, 16)  # written as 16 GPUs on one node
    base = predict(run, durations="roofline")
    on_dgx = predict(run, durations="roofline", cluster="dgx-h100")
    assert on_dgx.assumptions[0].startswith("cluster: dgx-h100 (8 GPUs per node")
    assert on_dgx.assumptions[1] == "ranks laid out 8 per node instead of 16"
    assert on_dgx.exposed_comm_ns > base.exposed_comm_ns  # the all-reduce now crosses two nodes


@pytest.mark.slow
def test_data_parallel_degree_needs_a_data_parallel_trace(tmp_path):
    b = TraceBuilder(4)
    b.communicator("tp0", [0, 1])
    b.communicator("tp1", [2, 3])
    for r in range(4):
        b.rank(r).allreduce("tp0" if r < 2 else "tp1", 10 * US)
    with pytest.raises(ValueError, match="spans 2 of the 4 ranks"):
        predict(b.write(tmp_path / "tp"), dp=8, durations="roofline")


def test_data_parallel_degree_needs_collectives_to_retarget(tmp_path):
    b = TraceBuilder(1)
    b.rank(0).kernel(10 * US)
    with pytest.raises(ValueError, match="has none"):
        predict(b.write(tmp_path / "single"), dp=8, durations="roofline")


@pytest.mark.slow
def test_fewer_data_parallel_ranks_than_traced(tmp_path):
    prediction = predict(ddp_trace(tmp_path, 4), dp=1, durations="roofline")
    assert (prediction.world_size, prediction.simulated_ranks, prediction.captured_ranks) == (1, 1, 1)
    assert prediction.exposed_comm_ns == 0


@pytest.mark.slow
def test_cli_lists_the_changed_assumptions_and_the_replay_error(measured_run):
    r = runner.invoke(predict_app, [str(measured_run)])
    assert r.exit_code == 0, r.output
    assert "measured iteration time" in r.output and "replay error" in r.output and "+0.00%" in r.output
    r = runner.invoke(predict_app, [str(measured_run), "--dp", "8", "--hardware", "a100-sxm-80gb", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["world_size"] == 8 and out["replay_error"] is None
    assert [a.split(" ")[0] for a in out["assumptions"]] == ["data-parallel", "GPU:"]
