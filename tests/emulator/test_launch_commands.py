"""Launch commands `maya emulate` reads by their launchers' own code (`accelerate launch`, `deepspeed`, `trl sft`,
`tune run`;
torchrun's are in tests/cli/test_cli.py), the argument DeepSpeed's launcher gives each rank, and what is refused, by
name."""

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import fake_torchtune as fake_torchtune_cli
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator import launcher
from maya.emulator.launch_commands import LaunchCommandError, read
from maya.emulator.launcher import rank_argv


@pytest.fixture
def no_accelerate_config(tmp_path, monkeypatch):
    """No `accelerate config` file: accelerate fixes its default path at import, so HF_HOME alone does not isolate
    a developer's ~/.cache/huggingface config."""
    pytest.importorskip("accelerate")
    import accelerate.commands.launch

    monkeypatch.setattr(accelerate.commands.launch, "default_config_file", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("HF_HOME", str(tmp_path))


@pytest.fixture
def trl_read_here(no_accelerate_config):
    """TRL read in this process, its environment restored after: transformers' import sets TORCHINDUCTOR_CACHE_DIR,
    which later emulations of the session would hand their ranks (an unkeyed folder, not maya's compile cache)."""
    pytest.importorskip("trl")
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def deepspeed_here(monkeypatch):
    """DeepSpeed's runner with no CUDA_VISIBLE_DEVICES of this machine's."""
    pytest.importorskip("deepspeed")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_an_accelerate_launch_gives_the_shape_and_accelerates_environment(no_accelerate_config):
    """`accelerate launch --num_processes 2 --mixed_precision bf16 --use_fsdp` with no config file: accelerate's
    validation sees the two virtual GPUs (multi-GPU, as on a real 2-GPU node) and its FSDP settings reach the ranks
    as its launcher's environment; what the emulator sets per rank (RANK, MASTER_PORT, ...) is left to it."""
    launch = read(
        ["accelerate", "launch", "--num_processes", "2", "--mixed_precision", "bf16", "--use_fsdp", "t.py", "--x"],
        None,
    )
    assert (launch.argv, launch.nnodes, launch.nproc_per_node, launch.rank_argument) == (["t.py", "--x"], 1, 2, None)
    assert launch.env["ACCELERATE_MIXED_PRECISION"] == "bf16" and launch.env["ACCELERATE_USE_FSDP"] == "true"
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} & set(launch.env)


def test_accelerate_launch_reads_its_config_file_and_the_nodes_gpus(tmp_path, no_accelerate_config):
    """The settings of `accelerate config`'s file apply, as they do to `accelerate launch`; without --num_processes
    or a file, accelerate uses every GPU of the node (`maya emulate --nproc-per-node`)."""
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
        (  # accelerate's validation reads a missing --machine_rank: its TypeError, named
            ["accelerate", "launch", "--num_machines", "2", "--num_processes", "4", "--multi_gpu", "t.py"],
            "accelerate launch: TypeError",
        ),
    ],
)
def test_accelerate_launches_maya_cannot_stand_for_are_refused(no_accelerate_config, command, refused):
    with pytest.raises(LaunchCommandError, match=refused):
        read(command, None)


def test_a_deepspeed_launch_gives_each_rank_its_local_rank_argument(tmp_path, deepspeed_here):
    """`deepspeed --num_gpus 2 train.py ARGS` (no hostfile: this node): two ranks, each script given
    `--local_rank=N` after its name as `deepspeed.launcher.launch` gives it, and its node's sizes."""
    launch = read(
        ["deepspeed", "--hostfile", str(tmp_path / "none"), "--num_gpus", "2", "t.py", "--c", "ds.json"], None
    )
    assert (launch.argv, launch.nnodes, launch.nproc_per_node) == (["t.py", "--c", "ds.json"], 1, 2)
    assert launch.env == {"CROSS_SIZE": "1", "LOCAL_SIZE": "2"} and launch.node_rank_variables == ("CROSS_RANK",)
    assert [rank_argv(launch.argv, launch.rank_argument, r) for r in (0, 1)] == [
        ["t.py", "--local_rank=0", "--c", "ds.json"],
        ["t.py", "--local_rank=1", "--c", "ds.json"],
    ]
    plain = read(["deepspeed", "--hostfile", str(tmp_path / "none"), "--no_local_rank", "--module", "pkg.t"], 4)
    assert (plain.argv, plain.nproc_per_node, plain.rank_argument) == (["-m", "pkg.t"], 4, None)
    assert rank_argv(["-m", "pkg.t", "--x"], "--local_rank={local_rank}", 3) == ["-m", "pkg.t", "--local_rank=3", "--x"]


def test_a_deepspeed_hostfile_gives_the_nodes_without_reaching_them(tmp_path, deepspeed_here):
    """A hostfile's hosts and slots are the resource pool, selected by --num_nodes and --include as DeepSpeed does;
    no host is reached (pdsh and ssh are not run). Uneven slots are refused, naming them."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=8\nworker-1 slots=8\nworker-2 slots=4\n")
    launch = read(["deepspeed", "--hostfile", str(hostfile), "--num_nodes", "2", "t.py"], None)
    assert (launch.nnodes, launch.nproc_per_node, launch.env["CROSS_SIZE"]) == (2, 8, "2")
    assert launch.node_rank_variables == ("CROSS_RANK",)  # each rank's node index, as its node's launch.py sets it
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
def test_deepspeed_launches_maya_cannot_stand_for_are_refused(tmp_path, deepspeed_here, command, refused):
    with pytest.raises(LaunchCommandError, match=refused):
        read([command[0], "--hostfile", str(tmp_path / "none"), *command[1:]], None)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--nproc-per-node", "4", "--", "torchrun", "--nproc_per_node=2", "t.py"],
            "torchrun launches 1 x 2 ranks (torchrun's default --nnodes 1:1): give the job's shape once",
        ),
        (
            ["--nnodes", "2", "--", "torchrun", "--nproc_per_node=2", "t.py"],
            "torchrun launches 1 x 2 ranks (torchrun's default --nnodes 1:1)",
        ),
        (
            ["--nnodes", "2", "--", "torchrun", "--nnodes", "1", "--nproc_per_node=2", "t.py"],
            "torchrun launches 1 x 2 ranks: give the job's shape once",
        ),
    ],
)
@pytest.mark.slow
def test_maya_emulate_takes_the_jobs_shape_once(args, message):
    """Two shapes, ours and the launcher's, are refused before anything runs; a part the launcher chose itself
    is said to be its default."""
    r = CliRunner().invoke(app, ["emulate", *args])
    assert r.exit_code == 2 and message in r.stderr, r.stderr


@pytest.mark.slow  # each reading process imports its launcher afresh (DeepSpeed: about 8 s)
@pytest.mark.parametrize(
    "launcher, command, message",
    [
        (
            "deepspeed",
            ["deepspeed", "--hostfile", "{none}", "--num_gpus", "2", "t.py"],
            "deepspeed launches 1 x 2 ranks (DeepSpeed's default of one node: no hostfile at {none}): give the job's "
            "shape once",
        ),
        (
            "accelerate",
            ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "t.py"],
            "accelerate launch launches 1 x 2 ranks (accelerate's default --num_machines 1): give the job's shape once",
        ),
    ],
)
def test_the_shape_once_error_says_the_launchers_default(tmp_path, monkeypatch, launcher, command, message):
    """`maya emulate --nnodes 2 -- deepspeed ...` with no hostfile: the one node is DeepSpeed's default, not a shape
    the user gave; so is accelerate's one machine. The error says so (read apart: HF_HOME isolates accelerate's
    config file in the reading process, which imports accelerate afresh)."""
    pytest.importorskip(launcher)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    none = str(tmp_path / "no-hostfile")
    r = CliRunner().invoke(app, ["emulate", "--nnodes", "2", "--", *(w.format(none=none) for w in command)])
    assert r.exit_code == 2 and message.format(none=none) in " ".join(r.stderr.split()), r.stderr


@pytest.mark.parametrize(
    "command, launcher",
    [
        (["torchrun", "t.py"], None),
        (["accelerate", "launch", "t.py"], "accelerate"),
        (["/venv/bin/accelerate-launch", "t.py"], "accelerate"),
        (["python", "-m", "accelerate.commands.launch", "t.py"], "accelerate"),
        (["python3", "-m", "accelerate.commands.accelerate_cli", "launch", "t.py"], "accelerate"),
        (["deepspeed", "t.py"], "deepspeed"),
        (["ds", "t.py"], "deepspeed"),
        (["deepspeed.pt", "t.py"], "deepspeed"),
        (["python", "-m", "deepspeed.launcher.runner", "t.py"], "deepspeed"),
        (["trl", "sft", "--output_dir", "o"], "trl"),
        (["python", "-m", "trl.cli.main", "sft", "--output_dir", "o"], "trl"),
        (["tune", "run", "full_finetune_single_device", "--config", "c.yaml"], "torchtune"),
        (["python", "-m", "torchtune._cli.tune", "run", "r.py", "--config", "c.yaml"], "torchtune"),
    ],
)
def test_every_alias_of_a_launcher_is_read_by_its_launchers_code(monkeypatch, command, launcher):
    """`ds`, `accelerate-launch`, `python -m deepspeed.launcher.runner`, ... are the same launchers: read by them
    (here: a launcher that is not installed fails, naming it), never run as a rank's script."""
    if launcher is None:
        assert read(command, None).argv == ["t.py"]
        return
    for name in [launcher, *(n for n in sys.modules if n.startswith(f"{launcher}."))]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as where it is not installed
    with pytest.raises(LaunchCommandError, match="is not installed in maya's environment"):
        read(command, None)


@pytest.mark.slow  # transformers' import: 13 s
def test_a_trl_training_command_is_the_accelerate_launch_of_its_script(tmp_path, trl_read_here):
    """`trl sft ... --num_processes 2`: TRL's CLI gives accelerate what its script's parser does not take, and the
    rest to `trl/scripts/sft.py`; read as that accelerate launch (2 ranks, multi-GPU), nothing run."""
    import trl

    args = ["--model_name_or_path", "m", "--dataset_name", "d", "--bf16", "true", "--output_dir", str(tmp_path)]
    launch = read(["trl", "sft", *args[:4], "--num_processes", "2", *args[4:]], None)
    assert launch.argv == [str(Path(trl.__file__).parent / "scripts" / "sft.py"), *args]
    assert (launch.launcher, launch.nnodes, launch.nproc_per_node) == ("trl sft", 1, 2)
    assert launch.env["ACCELERATE_MIXED_PRECISION"] == "no"  # accelerate's; the script's --bf16 is its own
    one = read(["trl", "dpo", *args], None)
    assert one.argv[0].endswith("dpo.py") and (one.nproc_per_node, one.launcher) == (1, "trl dpo")


@pytest.mark.parametrize(
    "command, refused",
    [
        (["trl", "env"], r"maya emulate reads TRL's training commands \(.*sft"),
        (["trl"], "maya emulate reads TRL's training commands"),
        (["trl", "sft", "--output_dir", "o", "--no_such_option", "1"], "its parser refused these arguments"),
    ],
)
@pytest.mark.slow  # transformers' import
def test_trl_commands_maya_cannot_stand_for_are_refused(trl_read_here, command, refused):
    with pytest.raises(LaunchCommandError, match=refused):
        read(command, None)


def _torchtune_modules(monkeypatch) -> None:
    """Imports of torchtune from here on find it anew (those of the test's fake are dropped after it)."""
    for name in [n for n in sys.modules if n == "torchtune" or n.startswith("torchtune.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture
def fake_torchtune(tmp_path, monkeypatch):
    """torchtune 0.6.1's `tune` CLI as `tests/fake_torchtune.py` mimics it, first on this process's path and the
    child's (`PYTHONPATH`); `sys.path` as it was after (the CLI appends the working directory). Gives the recipes'
    folder the CLI names."""
    folder = tmp_path / "fake"
    recipes = fake_torchtune_cli.install(folder)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    with monkeypatch.context() as modules:
        _torchtune_modules(modules)
        yield recipes
        for name in [n for n in sys.modules if n == "torchtune" or n.startswith("torchtune.")]:
            del sys.modules[name]


def test_tune_run_is_its_recipe_in_one_process_or_a_torchrun_launch(tmp_path, monkeypatch, fake_torchtune):
    """`tune run RECIPE --config C`: torchtune's CLI finds the built-in recipe's file and config and runs it in its
    own process (one rank, which appends the working directory to `sys.path`); with torchrun options, torchrun's launch
    of it; a custom recipe is its module, as the CLI runs it."""
    recipes = fake_torchtune
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    one = read(["tune", "run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device"], None)
    assert one.argv == [
        str(recipes / "full_finetune_single_device.py"),
        "--config",
        str(recipes / "configs" / "llama3_2" / "1B_full_single_device.yaml"),
    ]
    assert (one.launcher, one.nnodes, one.nproc_per_node) == ("tune run", 1, 1)
    assert one.env == {"MAYA_EMU_APPEND_PATH": str(work)} and "one GPU" in one.defaults[0]
    assert str(work) not in sys.path  # the CLI's append stayed in the read
    two = read(["tune", "run", "--nproc_per_node=2", "full_finetune_distributed", "--config", "c.yaml", "x=1"], None)
    assert two.argv == [str(recipes / "full_finetune_distributed.py"), "--config", "c.yaml", "x=1"]
    assert (two.nnodes, two.nproc_per_node, two.env) == (1, 2, {})
    custom = read(
        ["tune", "run", "--nnodes", "2", "--nproc_per_node", "4", "--rdzv_endpoint", "h:29500", "mine/train.py"]
        + ["--config", "llama3_2/1B_full"],
        None,
    )
    assert custom.argv == ["-m", "mine.train", "--config", str(recipes / "configs" / "llama3_2" / "1B_full.yaml")]
    assert (custom.nnodes, custom.nproc_per_node) == (2, 4)
    python_m = read(["python", "-m", "torchtune._cli.tune", "run", "mine/train.py", "--config", "c.yaml"], None)
    assert (python_m.argv, python_m.nproc_per_node) == (["-m", "mine.train", "--config", "c.yaml"], 1)


@pytest.mark.parametrize(
    "command, refused, printed",
    [
        (["tune", "ls"], r"tune ls: maya emulate reads torchtune's `tune run", ""),
        (["tune"], "maya emulate reads torchtune's `tune run", ""),
        (
            ["tune", "run", "full_finetune_single_device"],
            "its parser refused these arguments",
            "The '--config' argument is required",
        ),
        (
            ["tune", "run", "--nproc_per_node", "2", "full_finetune_single_device", "--config", "c"],
            "its parser refused these arguments",
            "Recipe full_finetune_single_device does not support distributed training",
        ),
        (["tune", "run", "--no-python", "--nproc_per_node", "2", "r.py", "--config", "c"], "tune run --no-python", ""),
        (
            ["tune", "run", "--nnodes", "2", "--nproc_per_node", "4", "r.py", "--config", "c"],
            r"tune run --nnodes 2 without --rdzv_endpoint: torchtune then runs torchrun standalone",
            "",
        ),
        (["tune", "run", "--help"], "tune run --help: help was asked", "usage: tune run"),
    ],
)
def test_tune_commands_maya_cannot_stand_for_are_refused(fake_torchtune, capsys, command, refused, printed):
    """Each refusal names its reason: the subcommand, torchtune's own parser's (printed above the error), a
    multi-node launch torchtune would run standalone, or help asked for."""
    with pytest.raises(LaunchCommandError, match=refused):
        read(command, None)
    out, err = capsys.readouterr()
    assert printed in out + err


def test_tune_commands_are_checked_before_torchtune_is_imported(monkeypatch):
    """`tune ls` is refused for what it is, torchtune installed or not."""
    _torchtune_modules(monkeypatch)
    monkeypatch.setitem(sys.modules, "torchtune", None)
    with pytest.raises(LaunchCommandError, match="tune ls: maya emulate reads torchtune's `tune run"):
        read(["tune", "ls"], None)


def test_a_module_torchtune_fails_to_import_is_named(tmp_path, monkeypatch):
    """torchtune installed beside a torchao it cannot import (0.6.1 with torchao 0.18): the error names the module
    that failed, not "torchtune is not installed"."""
    folder = tmp_path / "fake"
    fake_torchtune_cli.install(
        folder,
        "raise ModuleNotFoundError(\"No module named 'torchao.dtypes.nf4tensor'\", name='torchao.dtypes.nf4tensor')",
    )
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    with monkeypatch.context() as modules:
        _torchtune_modules(modules)
        with pytest.raises(LaunchCommandError) as e:
            read(["tune", "run", "r.py", "--config", "c"], None)
        for name in [n for n in sys.modules if n == "torchtune" or n.startswith("torchtune.")]:
            del sys.modules[name]
    assert str(e.value).startswith("tune: torchtune's CLI failed to import torchao.dtypes.nf4tensor (No module named")


def test_an_accelerate_launch_of_one_process_is_one_rank(tmp_path, no_accelerate_config):
    """`distributed_type: 'NO'` with --num_processes 4: accelerate runs its simple launcher, one process (its
    validation leaves multi-GPU off), so the job is 1 x 1, said as accelerate's choice."""
    config = tmp_path / "config.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: 'no'\n")
    launch = read(["accelerate", "launch", "--config_file", str(config), "--num_processes", "4", "t.py"], None)
    assert (launch.nnodes, launch.nproc_per_node) == (1, 1)
    assert "simple launcher" in launch.defaults[0]


def test_the_launchers_pythonpath_reaches_the_ranks(tmp_path, monkeypatch, no_accelerate_config, deepspeed_here):
    """accelerate's DeepSpeed launch adds the working directory to PYTHONPATH, DeepSpeed's multi-node runner puts
    it first: a script importing a package of its folder runs as it does for real."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    accelerated = read(["accelerate", "launch", "--use_deepspeed", "--num_processes", "2", "t.py"], None)
    assert str(tmp_path) in accelerated.env["PYTHONPATH"].split(":")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=2\nworker-1 slots=2\n")
    ds = read(["deepspeed", "--hostfile", str(hostfile), "t.py"], None)
    assert ds.env["PYTHONPATH"] == f"{tmp_path}:/elsewhere"


@pytest.mark.parametrize("runner", ["openmpi", "mpich", "impi", "slurm", "mvapich"])
def test_deepspeeds_mpi_and_slurm_launchers_give_no_local_rank(tmp_path, deepspeed_here, runner):
    """On two hosts, DeepSpeed's openmpi/mpich/impi/slurm/mvapich launchers start the script with no `--local_rank`
    and no LOCAL_SIZE/CROSS_SIZE/CROSS_RANK; pdsh (the default) and --no_ssh run its launch.py, which gives them."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=2\nworker-1 slots=2\n")
    mpi = read(["deepspeed", "--hostfile", str(hostfile), "--launcher", runner, "t.py"], None)
    assert (mpi.nnodes, mpi.rank_argument, mpi.node_rank_variables) == (2, None, ())
    assert not {"LOCAL_SIZE", "CROSS_SIZE"} & set(mpi.env)
    for options in (["--launcher", "pdsh"], ["--launcher", runner, "--no_ssh", "--node_rank", "0"]):
        own = read(["deepspeed", "--hostfile", str(hostfile), *options, "t.py"], None)
        assert (own.rank_argument, own.env["CROSS_SIZE"]) == ("--local_rank={local_rank}", "2")


def test_deepspeed_takes_cuda_visible_devices_as_its_include(tmp_path, deepspeed_here, monkeypatch):
    """One node, no filter: DeepSpeed's runner makes CUDA_VISIBLE_DEVICES its --include (two GPUs here); a filter
    of the command wins over it."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    none = str(tmp_path / "none")
    assert read(["deepspeed", "--hostfile", none, "t.py"], None).nproc_per_node == 2
    assert read(["deepspeed", "--hostfile", none, "t.py"], 8).nproc_per_node == 2
    assert read(["deepspeed", "--hostfile", none, "--num_gpus", "4", "t.py"], 8).nproc_per_node == 4


def test_node_rank_variables_are_each_ranks_node(tmp_path):
    """DeepSpeed's `CROSS_RANK` is the node's index: rank 5 of 2 x 4 GPUs is on node 1."""
    (tmp_path / "preload.txt").write_text("")
    env = launcher._rank_env(
        tmp_path,
        tmp_path,
        tmp_path,
        tmp_path,
        5,
        launcher.Topology(2, 4),
        1234,
        None,
        node_rank_variables=["CROSS_RANK"],
    )
    assert (env["CROSS_RANK"], env["NODE_RANK"]) == ("1", "1")


def test_torchrun_nproc_per_node_gpu_is_the_nodes_gpus():
    """`--nproc-per-node gpu` / `auto` count the node's GPUs: maya emulate's --nproc-per-node; unknown, refused."""
    assert read(["torchrun", "--nproc-per-node", "gpu", "t.py"], 8).nproc_per_node == 8
    assert read(["torchrun", "--nproc-per-node", "auto", "t.py"], 2).nproc_per_node == 2
    with pytest.raises(LaunchCommandError, match="maya emulate --nproc-per-node N"):
        read(["torchrun", "--nproc-per-node", "gpu", "t.py"], None)
    with pytest.raises(LaunchCommandError, match="give the number of GPUs per node"):
        read(["torchrun", "--nproc-per-node", "cpu", "t.py"], 8)


@pytest.mark.parametrize(
    "fixture, command, refused",
    [
        (  # the child's torchrun parser a stand-in's (the real one's import takes ~5 s, the two below)
            "fake_torch_in_the_child",
            ["python", "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "gpu", "t.py", "--x"],
            ["torchrun", "--no-python", "t.sh"],
        ),
        pytest.param(  # 9 s here: two children importing torch
            None,
            ["python", "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "gpu", "t.py", "--x"],
            ["torchrun", "--no-python", "t.sh"],
            marks=pytest.mark.slow,
        ),
        pytest.param(  # 10 s here: two children importing torch
            "fake_torchtune",
            ["tune", "run", "--nproc_per_node", "2", "full_finetune_distributed", "--config", "llama3_2/1B_full"],
            ["tune", "run", "--nproc_per_node", "2", "full_finetune_single_device", "--config", "c"],
            marks=pytest.mark.slow,
        ),
        pytest.param(  # 15 s here: two reads importing accelerate
            "no_accelerate_config",
            ["accelerate", "launch", "--multi_gpu", "--num_processes", "4", "t.py", "--x"],
            ["accelerate", "launch", "--cpu", "t.py"],
            marks=pytest.mark.slow,
        ),
        pytest.param(  # 29 s here: two reads importing DeepSpeed
            "deepspeed_here",
            ["deepspeed", "--hostfile", "HOSTFILE", "--num_gpus", "2", "t.py", "--x"],
            ["deepspeed", "--hostfile", "HOSTFILE", "--no_python", "t.sh"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_launch_is_read_apart_as_in_process(request, tmp_path, fixture, command, refused):
    """`read_apart` answers with the launch `read` gives (a child process's JSON) and raises a refusal as the same
    LaunchCommandError text, for each launcher installed; a command that is no launch starts no child."""
    from maya.emulator.launch_commands import read_apart

    if fixture:
        request.getfixturevalue(fixture)
    command, refused = ([str(tmp_path / "none") if w == "HOSTFILE" else w for w in c] for c in (command, refused))
    assert read_apart(command, 4) == read(command, 4)
    with pytest.raises(LaunchCommandError) as here:
        read(refused, None)
    with pytest.raises(LaunchCommandError) as apart:
        read_apart(refused, None)
    assert str(apart.value) == str(here.value)
    assert read_apart(["python", "t.py"], None) is None


@pytest.fixture
def fake_torch_in_the_child(tmp_path, monkeypatch):
    """The child reading a launch imports a stand-in torch (`_fake_torch`); this process keeps the real one."""
    _fake_torch(tmp_path / "fake", monkeypatch, "")


def _fake_torch(folder, monkeypatch, on_import: str) -> None:
    """A `torch` package first on the child's path whose torchrun parser takes what torchrun's takes, running
    `on_import` when imported (the child then imports no real torch: these tests take a second)."""
    run = folder / "torch" / "distributed" / "run.py"
    run.parent.mkdir(parents=True)
    (folder / "torch" / "__init__.py").write_text(on_import)
    (run.parent / "__init__.py").write_text("")
    run.write_text(
        "import argparse\n\ndef get_args_parser():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--nnodes', default='1:1')\n    p.add_argument('--nproc-per-node', default='1')\n"
        "    p.add_argument('--no-python', action='store_true')\n"
        "    p.add_argument('-m', '--module', action='store_true')\n    p.add_argument('training_script')\n"
        "    p.add_argument('training_script_args', nargs=argparse.REMAINDER)\n    return p\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))


def test_a_launch_read_apart_survives_what_its_child_prints_and_keeps_what_its_import_sets(
    tmp_path, monkeypatch, capsys
):
    """A `sitecustomize` prints a banner to stdout as the child starts, the launcher's import prints too and sets a
    variable (as DeepSpeed's sets PYTORCH_NVML_BASED_CUDA_CHECK before its runner copies the environment): the
    launch is read, both prints reach stderr, the variable this process's environment, which the ranks inherit."""
    from maya.emulator.launch_commands import read_apart

    monkeypatch.delenv("MAYA_TEST_LAUNCHER_SET", raising=False)
    _fake_torch(tmp_path, monkeypatch, "import os\nprint('reading')\nos.environ['MAYA_TEST_LAUNCHER_SET'] = 'yes'\n")
    (tmp_path / "sitecustomize.py").write_text("print('banner')\n")
    launch = read_apart(["torchrun", "--nproc-per-node", "2", "t.py", "--x"], None)
    assert launch is not None and (launch.argv, launch.nnodes, launch.nproc_per_node) == (["t.py", "--x"], 1, 2)
    assert os.environ.get("MAYA_TEST_LAUNCHER_SET") == "yes"
    err = capsys.readouterr().err
    assert "banner" in err and "reading" in err


def test_inductors_cache_folder_named_by_a_launchers_import_stays_out_of_the_ranks(tmp_path, monkeypatch):
    """transformers' import (under `trl sft`) makes Inductor name its default cache folder in the environment: the
    read keeps it to itself, so the ranks keep maya's compile cache (the launcher sets it unless the user did)."""
    from maya.emulator.launch_commands import read_apart

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    _fake_torch(tmp_path, monkeypatch, "import os\nos.environ['TORCHINDUCTOR_CACHE_DIR'] = '/tmp/torchinductor_x'\n")
    assert read_apart(["torchrun", "--nproc-per-node", "2", "t.py"], None).nproc_per_node == 2
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


@pytest.mark.parametrize(
    "on_import, said",
    [
        ("import sys\nprint('half way')\nsys.exit(3)\n", "(exit code 3; its output above)"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "(killed by signal 9; it printed nothing)"),
    ],
)
def test_a_child_that_gives_no_answer_fails_loudly_with_its_output(tmp_path, monkeypatch, capsys, on_import, said):
    from maya.emulator.launch_commands import read_apart

    _fake_torch(tmp_path, monkeypatch, on_import)
    with pytest.raises(LaunchCommandError) as e:
        read_apart(["torchrun", "--nproc-per-node", "2", "t.py"], None)
    assert str(e.value) == f"torchrun: the process reading the command gave no answer {said}"
    assert ("half way" in capsys.readouterr().err) == ("exit code 3" in said)


def test_the_child_reading_a_launch_imports_this_maya(tmp_path, monkeypatch):
    """Another maya first on the child's path (a stale install, where this one was found through the working
    directory or sys.path) is not the one that reads the launch."""
    from maya.emulator.launch_commands import read_apart

    _fake_torch(tmp_path, monkeypatch, "")
    (tmp_path / "maya").mkdir()
    (tmp_path / "maya" / "__init__.py").write_text("raise SystemExit('another maya')\n")
    launch = read_apart(["torchrun", "--nproc-per-node", "2", "t.py"], None)
    assert launch is not None and (launch.argv, launch.nproc_per_node) == (["t.py"], 2)


@pytest.mark.slow  # 14 s here: DeepSpeed's import
def test_deepspeeds_import_sets_reach_this_process(deepspeed_here, monkeypatch):
    """DeepSpeed's import sets PYTORCH_NVML_BASED_CUDA_CHECK (its runner then copies the environment to the ranks):
    read apart, it is set here as the read in this process set it."""
    from maya.emulator.launch_commands import read_apart

    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    read_apart(["deepspeed", "--num_gpus", "2", "t.py"], None)
    assert os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"


@pytest.mark.slow
def test_maya_emulate_reads_a_launch_without_importing_its_framework(tmp_path):
    """The launcher's framework (torch for torchrun; DeepSpeed, accelerate) is imported by the process reading the
    command, not by `maya emulate`'s, which stays as light while the ranks run; the launcher's refusal still
    reaches the user (here torchrun's default shape against ours)."""
    import subprocess

    probe = (
        "import sys\nfrom maya.cli import app\n"
        "try:\n    app(['emulate', '--nnodes', '2', '--', 'torchrun', '--nproc-per-node', '2', 't.py'])\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('imported', sorted(m for m in ('torch', 'deepspeed', 'accelerate') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "exit 2" in r.stdout and "imported []" in r.stdout, r.stdout + r.stderr
    assert "torchrun launches 1 x 2 ranks (torchrun's default --nnodes 1:1)" in r.stderr


@pytest.mark.slow  # an emulation: 10 s here
def test_tune_runs_recipe_finds_the_working_directory_last_on_its_path(tmp_path, monkeypatch, fake_torchtune):
    """`tune run mine/train.py` (one process): the rank appends the working directory to `sys.path`, as torchtune's
    CLI does, after site-packages (on `PYTHONPATH` it came before them: a module there shadowed an installed one)."""
    work = tmp_path / "work"
    (work / "mine").mkdir(parents=True)
    (work / "mine" / "__init__.py").write_text("")
    (work / "mine" / "train.py").write_text(
        "import json, os, sys\nimport torch\ntorch.ones(4, device='cuda')\n"
        "print(json.dumps({'at': [i for i, p in enumerate(sys.path) if p in (os.getcwd(), '')], 'n': len(sys.path)}))\n"
    )
    (work / "c.yaml").write_text("x: 1\n")
    monkeypatch.chdir(work)
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app, ["emulate", "--out", str(out), "--", "tune", "run", "mine/train.py", "--config", "c.yaml"]
    )
    assert r.exit_code == 0, r.output
    seen = json.loads(next(line for line in (out / "logs" / "rank0.txt").read_text().splitlines() if line[:1] == "{"))
    assert seen["at"] == [seen["n"] - 1]


TUNE_FORMS = [
    ["tune", "run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device", "x=1"],
    ["tune", "run", "--nproc_per_node=2", "full_finetune_distributed", "--config", "llama3_2/1B_full"],
    ["tune", "run", "--nnodes", "2", "--nproc_per_node", "4", "--rdzv_endpoint", "h:1", "mine/t.py", "--config", "c"],
    ["tune", "run", "--nproc_per_node", "2", "full_finetune_single_device", "--config", "c"],
]
"""Forms of `tune run` the stand-in and torchtune's own CLI must read alike."""


@pytest.mark.slow  # torchtune's import (torchao): 5-10 s
def test_the_stand_in_reads_tune_run_as_torchtunes_own_cli(tmp_path, monkeypatch):
    """Where torchtune is installed: each form is read by its CLI as by `tests/fake_torchtune.py`'s (the recipes'
    folder aside), refusals included."""
    pytest.importorskip("torchtune")
    monkeypatch.chdir(tmp_path)

    def reads(recipes: Path) -> list[object]:
        answers = []
        for command in TUNE_FORMS:
            try:
                launch = read(command, None)
                answers.append(([w.replace(str(recipes), "R") for w in launch.argv], launch))
            except LaunchCommandError as e:
                answers.append(str(e))
        return answers

    import torchtune

    real = reads(Path(torchtune.__file__).parent.parent / "recipes")
    monkeypatch.setattr(sys, "path", list(sys.path))
    fake = tmp_path / "fake"
    recipes = fake_torchtune_cli.install(fake)
    monkeypatch.setattr(sys, "path", [str(fake), *sys.path])
    with monkeypatch.context() as modules:
        _torchtune_modules(modules)
        stood_in = reads(recipes)
        for name in [n for n in sys.modules if n == "torchtune" or n.startswith("torchtune.")]:
            del sys.modules[name]
    for a, b in zip(real, stood_in, strict=True):
        if isinstance(a, str):
            assert a == b
        else:
            assert a[0] == b[0] and replace(a[1], argv=[]) == replace(b[1], argv=[])
