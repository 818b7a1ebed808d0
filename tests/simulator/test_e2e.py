"""`maya predict` end to end on a real emulated trace: DistributedDataParallel MLP on 2 ranks."""

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest
import typer
from paths import EXAMPLE, WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.cli.predict import predict_cmd
from maya.core import hardware
from maya.estimators.calls import MULTI_TENSOR_OP
from maya.simulator import simulate, summarize
from maya.simulator.opcodes import COLL
from maya.simulator.retarget import data_parallel, with_nodes
from maya.simulator.trace import load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()
predict_app = typer.Typer()
predict_app.command()(predict_cmd)


def emulate_ddp(tmp_path_factory, emulator_cache, *flags) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAYA_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("MAYA_EMULATOR_CACHE", str(emulator_cache))
        r = runner.invoke(
            app,
            [
                "emulate",
                "--nproc-per-node",
                "2",
                *flags,
                "--out",
                str(out),
                "--",
                "python",
                str(WORKLOADS / "ddp_mlp.py"),
            ],
        )
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, emulator_cache):
    """Both ranks captured."""
    return emulate_ddp(tmp_path_factory, emulator_cache, "--no-dedup")


def predict_json(*args):
    r = runner.invoke(predict_app, [*map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_predict_ddp_structure(ddp_run, tmp_path, maya_home):
    timeline = tmp_path / "timeline.json"
    p = predict_json(
        ddp_run,
        "--durations",
        "roofline",
        "--price-per-gpu-hour",
        3.0,
        "--tokens-per-iteration",
        64,
        "--timeline",
        timeline,
    )
    assert p["iterations"] == 3 and p["steady_iterations"] == 2 and p["iteration_source"] == "ops"
    assert p["iteration_ms"] > 0 and 0 < p["mfu"] < 1 and p["oom"] is False
    assert (
        p["peak_memory_bytes"] > 0
        and p["headroom_bytes"] == hardware.get("h100-sxm").memory_bytes - p["peak_memory_bytes"]
    )
    assert p["cost_per_iteration"] == pytest.approx(p["iteration_ms"] / 1e3 * 2 * 3.0 / 3600)
    assert p["tokens_per_s"] == pytest.approx(64 / (p["iteration_ms"] / 1e3))
    assert [r["rank"] for r in p["ranks"]] == [0, 1]
    for r in p["ranks"]:
        parts = [r[k] for k in ("compute_ns", "exposed_comm_ns", "peer_wait_ns", "host_bound_ns", "idle_ns")]
        assert min(parts) >= 0 and sum(parts) == pytest.approx(r["iteration_ns"])
    events = json.loads(timeline.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    assert any(e.get("cat") == "collective" and "allreduce" in e["name"] for e in events)
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT prediction_id, iteration_ms, oom FROM predictions").fetchall()
    finally:
        con.close()
    assert rows == [(p["prediction_id"], pytest.approx(p["iteration_ms"]), False)]


def test_predict_prints_a_report(ddp_run):
    r = runner.invoke(predict_app, [str(ddp_run), "--durations", "roofline", "--price-per-gpu-hour", "2"])
    assert r.exit_code == 0, r.output
    for label in (
        "iteration time",
        "exposed communication",
        "waiting for peers",
        "MFU (model FLOPs)",
        "HFU (hardware FLOPs)",
        "peak memory",
        "predicted OOM",
        "cost per iteration",
        "2 steady of 3 (ops)",
    ):
        assert label in r.output


def test_both_ranks_allreduces_are_aligned(ddp_run):
    sim = simulate(load(ddp_run), hardware.get("h100-sxm"), "roofline")
    a, b = sim.result(0), sim.result(1)
    names = [sim.programs[0].frame["collective"].iat[ops[0].call] for ops in sim.programs[0].launches]
    assert names.count("allreduce") == 5  # one per gradient bucket, 2 buckets in steps 2 and 3
    assert a.launch_end.tolist() == b.launch_end.tolist()
    assert (a.launch_start <= a.launch_end).all()
    prediction = summarize(sim)
    assert prediction.ranks[0].iteration_ns == prediction.ranks[1].iteration_ns


def test_the_optimizer_step_waits_for_the_gradients_all_reduce(ddp_run):
    """DDP's `Work.wait()` makes the compute stream wait for each bucket's all-reduce. torch's NCCL process group
    (torch 2.15's nccl2) polls the work's end event when it enqueues it and skips that wait if the event says
    complete: polls of work behind a collective must find it running (the emulator's completion.c), else the
    dependency is gone from the trace and the replay runs the optimizer's kernels while the gradients are still
    being reduced (a slow rank's peers then showed no compute at all, only exposed communication)."""
    sim = simulate(load(ddp_run), hardware.get("h100-sxm"), "roofline")
    for rank, program in sim.programs.items():
        result, device = sim.result(rank), sim.devices[[r.rank for r in sim.replicas].index(rank)]
        frame = program.frame
        coll = np.flatnonzero(program.opcodes == COLL)
        # the fused AdamW's launches, priced as multi-tensor passes (the only multi-tensor kernels of this run)
        adam = np.flatnonzero(frame["op"].eq(MULTI_TENSOR_OP).to_numpy() & (device > 0))
        assert len(adam) >= 3, "one fused AdamW step per iteration"
        for call in adam:
            reduces = [program.arg[c] for c in coll if c < call and frame["collective"].iat[c] == "allreduce"]
            start = result.end[call] - device[call]
            assert not reduces or start >= result.launch_end[reduces].max(), (rank, call)
    names = sim.programs[0].frame["api"]
    waits = sim.programs[0].frame[(names == "cudaStreamWaitEvent") & (sim.programs[0].frame["stream_id"] == 0)]
    assert len(waits) >= 2  # the compute stream waits for the last bucket's all-reduce in steps 2 and 3


def test_deduplicated_capture_predicts_like_the_full_one(ddp_run, tmp_path_factory, emulator_cache):
    dedup = emulate_ddp(tmp_path_factory, emulator_cache)
    traces = load(dedup)
    assert list(traces.ranks) == [0] and traces.ranks[0].represents == [0, 1]
    full, one = (summarize(simulate(load(run), hardware.get("h100-sxm"), "roofline")) for run in (ddp_run, dedup))
    assert [r.rank for r in one.ranks] == [0, 1]
    # The full run's two ranks are not always the same trace: torch's NCCL watchdog thread polls events
    # (cudaEventQuery) at times set by the host's clock, so under load a poll can land a few calls earlier on one
    # rank than on the other (seen: 250 ns of a 310 us iteration). Deduplication replays rank 0's trace for both.
    assert one.iteration_ns == pytest.approx(full.iteration_ns, rel=1e-3)


def test_missing_rank_is_named(ddp_run, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(ddp_run, partial)
    for table in partial.iterdir():
        shutil.rmtree(table / "rank=1", ignore_errors=True)
    r = runner.invoke(predict_app, [str(partial), "--durations", "roofline"])
    assert r.exit_code == 1
    assert "pg:0: rank(s) 1" in " ".join(r.output.split())


def test_estimator_durations_need_a_version_then_use_it(ddp_run):
    r = runner.invoke(predict_app, [str(ddp_run), "--durations", "estimators"])
    assert r.exit_code == 1 and "estimators not available" in r.output
    from maya.estimators import TrainConfig, train_version
    from maya.estimators.efficiency_model import ModelParams
    from maya.estimators.training_data import load_kernels, neusight_dir

    measured = load_kernels(neusight_dir() / "kernels_train.parquet")
    measured = measured[measured["family"].isin(["gemm", "elementwise"])].sample(1500, random_state=1)
    train_version(
        measured.reset_index(drop=True), TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)
    )
    p = predict_json(ddp_run, "--durations", "estimators")
    assert p["durations"] == "estimators v1" and p["iteration_ms"] > 0
    auto = predict_json(ddp_run)
    assert auto["durations"] == "estimators v1"
    # the tiny DDP model's kernels are shorter than NeuSight's call-by-call timings resolve: said so
    assert any("bounded, not fitted" in note for note in p["notes"])
    from maya.simulator import EstimatorDurations

    frame = simulate(load(ddp_run), hardware.get("h100-sxm"), "roofline").programs[0].frame
    gemms = frame[frame["family"] == "gemm"].assign(m=8192.0, n=8192.0, k=8192.0, batch=1.0, flops=np.nan)
    large = EstimatorDurations()  # the same model on GEMMs far above the floor: no note
    assert len(gemms) and (large.device_ns(gemms, hardware.get("h100-sxm")) > 1e5).all() and large.notes == []


def test_data_parallel_degree_retargets_the_ddp_all_reduces(ddp_run):
    """The 2-rank DDP capture predicted for 16 ranks on H100 nodes of 8: every rank replays a captured one,
    the gradient all-reduces span all 16 and cross nodes, so they cost more."""
    two = predict_json(ddp_run, "--durations", "roofline")
    sixteen = predict_json(ddp_run, "--durations", "roofline", "--dp", "16")
    assert (sixteen["world_size"], sixteen["simulated_ranks"], sixteen["captured_ranks"]) == (16, 16, 2)
    assert sixteen["assumptions"][0].startswith("ranks laid out 8 per node instead of 2")
    assert sixteen["assumptions"][1].startswith("data-parallel degree 16 instead of 2 (2 node(s) of 8 GPUs)")
    sim2, sim16 = (
        simulate(load(ddp_run), hardware.get("h100-sxm"), "roofline"),
        simulate(data_parallel(with_nodes(load(ddp_run), 8), 16), hardware.get("h100-sxm"), "roofline"),
    )
    coll = sim2.programs[0].launch_ops
    assert len(coll) and (sim16.devices[0][coll] > sim2.devices[0][coll]).all()
    assert sixteen["iteration_ms"] >= two["iteration_ms"]


@pytest.mark.parametrize("script, noted", [(WORKLOADS / "top1_routing.py", True), (EXAMPLE, False)])
def test_predict_notes_assumed_routing(script, noted, tmp_path):
    """A router's choices on scores only a GPU computes are a balanced router's under emulation: predict
    says so and names the op; a script that only logs its loss with `.item()` gets no such note, and
    neither gets a stand-in note (the MoE's `nonzero` counts follow from the assumed routing)."""
    out = tmp_path / "run"
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "python", str(script)])
    assert r.exit_code == 0, r.output
    assert any(load(out).ranks[0].calls["data_dependent"])  # both read device values
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    notes = json.loads(p.stdout)["notes"]
    assert not [n for n in notes if "stand-ins" in n]
    routing = [n for n in notes if "routing was assumed" in n]
    assert bool(routing) == noted
    if noted:
        assert "aten::argmax" in routing[0]


@pytest.fixture(scope="module")
def recompute_runs(tmp_path_factory, emulator_cache):
    """`recompute_mlp.py` emulated without recomputation and with torch's two checkpointing implementations."""
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAYA_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("MAYA_EMULATOR_CACHE", str(emulator_cache))
        for mode in ("none", "reentrant", "non-reentrant"):
            out = tmp_path_factory.mktemp(mode) / "run"
            r = runner.invoke(
                app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "recompute_mlp.py"), mode]
            )
            assert r.exit_code == 0, r.output
            runs[mode] = predict_json(out, "--durations", "roofline")
    return runs


def test_mfu_counts_model_flops_and_hfu_the_recomputed_ones(recompute_runs):
    """Model FLOPs (MFU) are the same with and without recomputation; hardware FLOPs (HFU) add the forward
    passes run again in the backward pass (both blocks' two GEMMs; non-reentrant checkpointing stops
    recomputing once the tensors the backward needs are back, so it recomputes less)."""
    plain = recompute_runs["none"]
    assert plain["hardware_flops_per_iteration"] == plain["model_flops_per_iteration"] > 0
    assert plain["hfu"] == pytest.approx(plain["mfu"])
    gemm = 2 * 64 * 256 * 1024  # one block GEMM's forward FLOPs
    for mode in ("reentrant", "non-reentrant"):
        p = recompute_runs[mode]
        assert p["model_flops_per_iteration"] == plain["model_flops_per_iteration"]
        again = p["hardware_flops_per_iteration"] - p["model_flops_per_iteration"]
        assert again >= gemm and again % gemm == 0, (mode, again)
        assert p["hfu"] > p["mfu"]
    assert recompute_runs["reentrant"]["hardware_flops_per_iteration"] - plain["model_flops_per_iteration"] == 4 * gemm


def test_a_dense_cross_entropy_max_is_no_routing(recompute_runs):
    """The stabilising max of a cross-entropy along the vocabulary drops its indices: no "routing was assumed"."""
    for p in recompute_runs.values():
        assert not [n for n in p["notes"] if "routing was assumed" in n], p["notes"]
