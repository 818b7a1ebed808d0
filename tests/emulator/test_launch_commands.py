"""Launch commands `maya emulate` reads by their launchers' own code (`accelerate launch`, `deepspeed`; torchrun's
are in tests/cli/test_cli.py), the argument DeepSpeed's launcher gives each rank, and what is refused, by name."""

import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.launch_commands import LaunchCommandError, read
from maya.emulator.launcher import rank_argv


def test_an_accelerate_launch_gives_the_shape_and_accelerates_environment(tmp_path, monkeypatch):
    """`accelerate launch --num_processes 2 --mixed_precision bf16 --use_fsdp` with no config file: accelerate's
    validation sees the two virtual GPUs (multi-GPU, as on a real 2-GPU node) and its FSDP settings reach the ranks
    as its launcher's environment; what the emulator sets per rank (RANK, MASTER_PORT, ...) is left to it."""
    pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # no `accelerate config` file
    launch = read(
        ["accelerate", "launch", "--num_processes", "2", "--mixed_precision", "bf16", "--use_fsdp", "t.py", "--x"],
        None,
    )
    assert (launch.argv, launch.nnodes, launch.nproc_per_node, launch.rank_argument) == (["t.py", "--x"], 1, 2, None)
    assert launch.env["ACCELERATE_MIXED_PRECISION"] == "bf16" and launch.env["ACCELERATE_USE_FSDP"] == "true"
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} & set(launch.env)


def test_accelerate_launch_reads_its_config_file_and_the_nodes_gpus(tmp_path, monkeypatch):
    """The settings of `accelerate config`'s file apply, as they do to `accelerate launch`; without --num_processes
    or a file, accelerate uses every GPU of the node (`maya emulate --nproc-per-node`)."""
    pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    config = tmp_path / "config.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_machines: 1\n"
        "num_processes: 4\ngpu_ids: all\nuse_cpu: false\n"
    )
    launch = read(["accelerate", "launch", "--config_file", str(config), "-m", "pkg.train"], None)
    assert (launch.argv, launch.nproc_per_node, launch.env["ACCELERATE_MIXED_PRECISION"]) == (
        ["-m", "pkg.train"],
        4,
        "fp16",
    )
    assert read(["accelerate", "launch", "t.py"], 8).nproc_per_node == 8
    assert read(["accelerate", "launch", "t.py"], None).nproc_per_node == 1


@pytest.mark.parametrize(
    "command, refused",
    [
        (["accelerate", "launch", "--cpu", "t.py"], "accelerate launch --cpu"),
        (["accelerate", "launch", "--multi_gpu", "--num_processes", "1", "t.py"], "at least 2 processes"),
        (["accelerate", "env"], "maya emulate runs `accelerate launch"),
    ],
)
def test_accelerate_launches_maya_cannot_stand_for_are_refused(tmp_path, monkeypatch, command, refused):
    if command[1] == "launch":
        pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(LaunchCommandError, match=refused):
        read(command, None)


def test_a_deepspeed_launch_gives_each_rank_its_local_rank_argument(tmp_path):
    """`deepspeed --num_gpus 2 train.py ARGS` (no hostfile: this node): two ranks, each script given
    `--local_rank=N` after its name as `deepspeed.launcher.launch` gives it, and its node's sizes."""
    pytest.importorskip("deepspeed")
    launch = read(
        ["deepspeed", "--hostfile", str(tmp_path / "none"), "--num_gpus", "2", "t.py", "--c", "ds.json"], None
    )
    assert (launch.argv, launch.nnodes, launch.nproc_per_node) == (["t.py", "--c", "ds.json"], 1, 2)
    assert launch.env == {"CROSS_SIZE": "1", "LOCAL_SIZE": "2", "CROSS_RANK": "0"}
    assert [rank_argv(launch.argv, launch.rank_argument, r) for r in (0, 1)] == [
        ["t.py", "--local_rank=0", "--c", "ds.json"],
        ["t.py", "--local_rank=1", "--c", "ds.json"],
    ]
    plain = read(["deepspeed", "--hostfile", str(tmp_path / "none"), "--no_local_rank", "--module", "pkg.t"], 4)
    assert (plain.argv, plain.nproc_per_node, plain.rank_argument) == (["-m", "pkg.t"], 4, None)
    assert rank_argv(["-m", "pkg.t", "--x"], "--local_rank={local_rank}", 3) == ["-m", "pkg.t", "--local_rank=3", "--x"]


def test_a_deepspeed_hostfile_gives_the_nodes_without_reaching_them(tmp_path):
    """A hostfile's hosts and slots are the resource pool, selected by --num_nodes and --include as DeepSpeed does;
    no host is reached (pdsh and ssh are not run). Uneven slots are refused, naming them."""
    pytest.importorskip("deepspeed")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=8\nworker-1 slots=8\nworker-2 slots=4\n")
    launch = read(["deepspeed", "--hostfile", str(hostfile), "--num_nodes", "2", "t.py"], None)
    assert (launch.nnodes, launch.nproc_per_node, launch.env["CROSS_SIZE"]) == (2, 8, "2")
    assert "CROSS_RANK" not in launch.env  # the node's rank differs between ranks: not given
    included = read(["deepspeed", "--hostfile", str(hostfile), "--include", "worker-0:0,1@worker-1:2,3", "t.py"], None)
    assert (included.nnodes, included.nproc_per_node) == (2, 2)
    with pytest.raises(LaunchCommandError, match="worker-2: 4 GPUs; maya emulate runs jobs of the same number"):
        read(["deepspeed", "--hostfile", str(hostfile), "t.py"], None)


@pytest.mark.parametrize(
    "command, refused",
    [
        (["deepspeed", "--num_nodes", "2", "t.py"], "DeepSpeed takes its nodes from a hostfile"),
        (["deepspeed", "--include", "localhost:0,1", "t.py"], "a node of 1 GPUs: maya emulate --nproc-per-node"),
        (["deepspeed", "--autotuning", "run", "t.py"], "deepspeed --autotuning run: not emulated"),
        (["deepspeed", "--no_python", "t.sh"], "deepspeed --no_python: not emulated"),
    ],
)
def test_deepspeed_launches_maya_cannot_stand_for_are_refused(tmp_path, command, refused):
    pytest.importorskip("deepspeed")
    with pytest.raises(LaunchCommandError, match=refused):
        read([command[0], "--hostfile", str(tmp_path / "none"), *command[1:]], None)


def test_maya_emulate_takes_the_jobs_shape_once():
    """`maya emulate --nproc-per-node 4 -- deepspeed --num_gpus 2 ...`: two shapes; refused before anything runs."""
    pytest.importorskip("deepspeed")
    r = CliRunner().invoke(app, ["emulate", "--nproc-per-node", "4", "--", "deepspeed", "--num_gpus", "2", "t.py"])
    assert r.exit_code == 2 and "deepspeed launches 1 x 2 ranks: give the job's shape once" in r.stderr
