"""`maya predict` on a run that stopped on an out-of-memory failure reports the failure — which rank, where,
how much against the capacity, what would get past it — not the ranks the stop left uncaptured (issue 20)."""

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.simulator.oom import RecordedOutOfMemory
from maya.simulator.predict import predict
from maya_trace_spec import Run, RunWriter, synthetic

GiB = 2**30


def oom_run(path, world_size: int):
    """Rank 0 of a `world_size`-rank job, captured alone, its last allocation failing inside op 3."""
    run = synthetic.write_run(path, world_size=1, calls_per_rank=50, ops_per_rank=8)
    info = Run(run).info
    w = RunWriter(run)
    w.write(
        "run",
        {k: [v] for k, v in {**info, "status": "oom", "world_size": world_size, "nproc_per_node": world_size}.items()},
    )
    w.write(
        "memory_events",
        {
            "seq": [2, 3],
            "ts_ns": [30, 40],
            "kind": ["alloc", "oom"],
            "space": ["device"] * 2,
            "bytes": [60 * GiB, 32 * GiB],
            "device": [0, 0],
            "allocated_bytes": [60 * GiB, 60 * GiB],
            "op_id": [2, 3],
        },
        rank=0,
    )
    return run


@pytest.mark.slow
def test_a_run_stopped_by_an_oom_reports_it(tmp_path):
    run = oom_run(tmp_path / "run", world_size=8)
    with pytest.raises(RecordedOutOfMemory) as e:
        predict(run)
    message = str(e.value)
    assert message.startswith(
        "rank 0 ran out of device memory in aten::mm, module model.layers.0.mlp, backward, "
        "iteration 0: it requested 32.00 GiB with 60.00 GiB in use, 92.00 GiB in all of the "
        "h100-sxm's 80.00 GiB"
    )  # the captured device's capacity
    assert "rank(s) 1, 2, 3, 4, 5, 6, 7 were captured" in message and "neither captured" not in message
    assert (
        "at least 92.00 GiB per GPU (catalog GPUs with that much: h100-nvl (94 GiB), h20 (96 GiB), h200 (140 GiB), "
        "b200 (179 GiB))"
    ) in message
    r = CliRunner().invoke(app, ["predict", str(run)])
    assert r.exit_code == 3 and "rank 0 ran out of device memory" in r.output


@pytest.mark.slow
def test_a_fully_captured_oom_run_is_predicted_with_the_failure(tmp_path):
    run = oom_run(tmp_path / "run", world_size=1)
    prediction = predict(run)
    assert prediction.oom and prediction.oom_reason.startswith("rank 0 ran out of device memory in aten::mm")


@pytest.mark.e2e
@pytest.mark.slow
def test_eight_rank_ddp_oom_end_to_end(tmp_path):
    """The issue's case: `maya emulate` of an 8-rank DDP job whose rank 0 runs out of memory exits 3;
    `maya predict` then answered "communicator member(s) neither captured nor represented ..."."""
    runner = CliRunner()
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["emulate", "--nproc-per-node", "8", "--out", str(out), "--", "python", str(WORKLOADS / "ddp_oom.py")]
    )
    assert r.exit_code == 3, r.output
    r = runner.invoke(app, ["predict", str(out)])
    assert r.exit_code == 3, r.output
    text = " ".join(r.output.split())
    assert "rank 0 ran out of device memory in aten::gelu, module DistributedDataParallel.module.1, forward" in text
    assert "it requested 32.00 GiB" in text and "neither captured" not in text
