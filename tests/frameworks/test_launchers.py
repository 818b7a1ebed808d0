"""Launchers users type in front of a script, run under `maya emulate` as they are: `accelerate launch`, DeepSpeed's
`deepspeed` with its own engine, and the DDP tutorial's `torch.multiprocessing.spawn` from `python train.py`; each
on 2 virtual H100s, then predicted."""

import json

import pytest
from paths import WORKLOADS

from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _communicator_sizes(out) -> set[int]:
    return {c["comm_size"] for c in Run(out).table("communicators").to_pylist()}


def test_accelerate_launch_runs_its_script_on_the_gpus_it_asks_for(tmp_path, emulate_and_predict, monkeypatch):
    """`accelerate launch --num_processes 2 --mixed_precision bf16 accelerate_loop.py` (no `accelerate config`
    file): two ranks with accelerate's environment, DDP between them."""
    pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    argv = ["accelerate", "launch", "--num_processes", "2", "--mixed_precision", "bf16"]
    output, prediction = emulate_and_predict(
        tmp_path / "run", [*argv, str(WORKLOADS / "accelerate_loop.py")], "--iterations", "3"
    )
    assert "stopped after 3 training iterations" in output
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0
    assert _communicator_sizes(tmp_path / "run") == {2}


@pytest.mark.parametrize("clipping", [None, 1.0])
def test_deepspeed_launcher_and_engine(tmp_path, emulate_and_predict, clipping):
    """`deepspeed --num_gpus 2 deepspeed_engine.py --deepspeed_config ds.json`: each rank's script is given its own
    `--local_rank=N` (the script checks it against LOCAL_RANK), and ZeRO-2's bf16 engine steps. With
    `gradient_clipping` both ranks take every step (no overflow read on one rank: the prediction would deadlock)."""
    pytest.importorskip("deepspeed")
    config = tmp_path / "ds.json"
    settings = {
        "train_micro_batch_size_per_gpu": 8,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "torch_adam": True}},
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2},
    }
    config.write_text(json.dumps(settings if clipping is None else {**settings, "gradient_clipping": clipping}))
    argv = ["deepspeed", "--hostfile", str(tmp_path / "no-hostfile"), "--num_gpus", "2"]
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        [*argv, str(WORKLOADS / "deepspeed_engine.py"), "--deepspeed_config", str(config)],
        "--iterations",
        "3",
        "--no-dedup",
    )
    assert "stopped after 3 training iterations" in output
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0
    assert _communicator_sizes(tmp_path / "run") == {2}
    logs = [(tmp_path / "run" / "logs" / f"rank{r}.txt").read_text() for r in (0, 1)]
    assert all("AssertionError" not in log for log in logs)
    assert "OVERFLOW" not in logs[0]  # DeepSpeed logs a skipped step on rank 0 only
    collectives = [0, 0]
    for call in Run(tmp_path / "run").table("api_calls").to_pylist():
        collectives[call["rank"]] += call["collective_name"] is not None
    assert collectives[0] == collectives[1] > 0  # equal steps: 12 all-reduces against 9 when rank 0 skipped one


def test_deepspeed_zero2_holds_its_reduce_bucket_as_configured(tmp_path, emulate_and_predict):
    """ZeRO-2's gradient bucket is `reduce_bucket_size` elements of the bf16 gradients, allocated in the backward
    whatever the model's size (DeepSpeed's default 5e8: 1e9 bytes, most of TRL's ZeRO-2 peak): the trace holds a
    device segment for it (1e9 bytes rounded up to 2 MiB), and the peak tensors took moves with the setting. It moves
    by the bucket's bytes at most, and by less where the smaller bucket's run peaks where no bucket is allocated (by
    4% less here)."""
    pytest.importorskip("deepspeed")
    peaks, segments = {}, {}
    for elements in (500_000_000, 50_000_000):
        config = tmp_path / f"ds-{elements}.json"
        config.write_text(
            json.dumps(
                {
                    "train_micro_batch_size_per_gpu": 8,
                    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "torch_adam": True}},
                    "bf16": {"enabled": True},
                    "zero_optimization": {"stage": 2, "reduce_bucket_size": elements},
                }
            )
        )
        out = tmp_path / f"run-{elements}"
        argv = ["deepspeed", "--hostfile", str(tmp_path / "no-hostfile"), "--num_gpus", "2"]
        _, prediction = emulate_and_predict(
            out, [*argv, str(WORKLOADS / "deepspeed_engine.py"), "--deepspeed_config", str(config)], "--iterations", "2"
        )
        peaks[elements] = prediction["peak_allocated_bytes"]
        segments[elements] = {
            e["bytes"] for e in Run(out).table("memory_events").to_pylist() if e["kind"] == "alloc" and e["rank"] == 0
        }
    assert 1_000_341_504 in segments[500_000_000] and max(segments[50_000_000]) < 10**9, segments
    bucket_bytes = 2 * (500_000_000 - 50_000_000)
    assert 0.9 * bucket_bytes <= peaks[500_000_000] - peaks[50_000_000] <= bucket_bytes, peaks


def test_a_script_that_spawns_its_workers(tmp_path, emulate_and_predict):
    """`python spawn_ddp.py` calling `mp.spawn(train, nprocs=torch.cuda.device_count())` under `--nproc-per-node 2`:
    each rank runs the worker of its local rank, on its own GPU, and their DDP is recorded."""
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        ["python", str(WORKLOADS / "spawn_ddp.py"), "3"],
        "--nproc-per-node",
        "2",
        "--no-dedup",
    )
    logs = [(tmp_path / "run" / "logs" / f"rank{r}.txt").read_text() for r in (0, 1)]
    assert [f"worker {r} of 2 on cuda:{r} done" in log for r, log in enumerate(logs)] == [True, True]
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0
    assert _communicator_sizes(tmp_path / "run") == {2}


def test_a_spawn_in_a_launched_rank_is_refused_and_the_launch_is_kept(tmp_path):
    """`torchrun --nproc-per-node 2 spawn_ddp.py`: torchrun starts the job's ranks, so the script's own `mp.spawn`
    would start workers outside the job (the stand-in that runs a worker in its rank is for `python SCRIPT` alone):
    each rank fails, naming the spawn and the launch. The run keeps the launch as typed beside each rank's command."""
    from typer.testing import CliRunner

    from maya.cli import app

    command = ["torchrun", "--nproc-per-node", "2", str(WORKLOADS / "spawn_ddp.py"), "1"]
    r = CliRunner().invoke(app, ["emulate", "--out", str(tmp_path / "run"), "--no-dedup", "--", *command])
    assert r.exit_code == 1, r.output
    refusal = "SpawnNotEmulated: torch.multiprocessing spawn of 2 worker(s) in a rank `torchrun --nproc-per-node 2"
    logs = [(tmp_path / "run" / "logs" / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert all(refusal in log and "worker 0 of 2" not in log for log in logs), logs[0][-2000:]
    run = Run(tmp_path / "run").info
    assert json.loads(run["attrs"])["launch"] == {
        "command": command,
        "env": {},
        "rank_argument": None,
        "node_rank_variables": [],
    }
    assert json.loads(run["command"]) == ["python", str(WORKLOADS / "spawn_ddp.py"), "1"]
    assert json.loads(run["attrs"])["rank_status"] == {"0": "failed", "1": "failed"}  # what a deadlock names
