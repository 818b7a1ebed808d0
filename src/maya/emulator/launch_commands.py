"""Launch commands `maya emulate` reads: `torchrun`, `accelerate launch` and `deepspeed` (their other console
scripts and `python -m` forms too), each by its own parser, TRL's training commands (`trl sft`, `trl dpo`, ...:
an `accelerate launch` of TRL's script, read by TRL's CLI, then as that launch) and torchtune's `tune run` (its
recipe in one process, or a torchrun launch of it).

A launcher starts a job's ranks itself; under `maya emulate` the emulator starts them, so a launch command is read
for what it would have given each rank: the script's command (`SCRIPT ARGS` / `-m MODULE ARGS`), the job's shape
(nodes, GPUs per node), the environment the launcher adds (accelerate's `ACCELERATE_*` and `FSDP_*` settings,
DeepSpeed's `CROSS_SIZE`, ...) and an argument it gives each rank's script (DeepSpeed's `--local_rank=N`). Each
launcher's own code reads its options and configuration (accelerate's config file, DeepSpeed's hostfile), so they
mean what they mean to it. What cannot be stood in for fails with `LaunchCommandError`, naming it. No launcher
process runs, and no host of a hostfile is reached: the ranks run here.

`maya emulate` reads a launch with `read_apart`: `read` in a short-lived child process that answers with the launch as
JSON, so the launcher's framework (torch, DeepSpeed, accelerate: up to 8 s and 0.8 GB) is never imported into the
process that watches the ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from maya.core import settings

COMMANDS = {
    "torchrun": "torchrun",
    "accelerate": "accelerate",
    "accelerate-launch": "accelerate launch",
    "deepspeed": "deepspeed",
    "ds": "deepspeed",
    "deepspeed.pt": "deepspeed",
    "trl": "trl",
    "tune": "tune",
}
"""Console scripts read as launch commands, by the launcher they start (DeepSpeed installs `ds` and
`deepspeed.pt` beside `deepspeed`; accelerate `accelerate-launch` beside `accelerate`)."""

MODULES = {
    "torch.distributed.run": "torchrun",
    "accelerate.commands.accelerate_cli": "accelerate",
    "accelerate.commands.launch": "accelerate launch",
    "deepspeed.launcher.runner": "deepspeed",
    "trl.cli.main": "trl",
    "torchtune._cli.tune": "tune",
}
"""`python -m MODULE ...`: the same launchers run as modules."""

UNREAD_MODULES = frozenset({"deepspeed.launcher.launch", "torch.distributed.launch"})
"""Launcher modules that start ranks but are not read (refused by name, as every other launcher)."""

RANK_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"})
"""What a launcher sets that the emulator sets for each rank itself (torchrun's environment on its virtual GPUs;
every rank sees the node's GPUs, as `CUDA_VISIBLE_DEVICES` gives them to a real rank)."""


READ_ONLY_VARIABLES = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
"""What a launcher's imports set in the reading process that the ranks do not get: Inductor names its default
cache folder there when transformers imports it (`trl sft`), and the ranks keep maya's compile cache."""


_MAYA_ROOT = str(Path(__file__).resolve().parents[2])
"""The folder this maya package is in: `read_apart`'s child imports it first (the same maya as its parent's)."""


class LaunchCommandError(ValueError):
    """A launch command `maya emulate` cannot stand for (its message says why and what to give instead)."""


@dataclass(frozen=True)
class Launch:
    """What a launch command gives the ranks: the script's command, the job's shape, the environment the launcher
    adds, an argument after the script formatted with each rank's `local_rank` (None: none)."""

    launcher: str
    argv: list[str]
    nnodes: int
    nproc_per_node: int
    env: dict[str, str] = field(default_factory=dict)
    rank_argument: str | None = None
    node_rank_variables: tuple[str, ...] = ()
    defaults: tuple[str, ...] = ()
    """`node_rank_variables`: set to each rank's node index (DeepSpeed's `CROSS_RANK`); `defaults`: the parts of
    the shape the launcher chose itself, said when maya emulate is given another."""


def launcher_of(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """The launcher `args` start (`torchrun`, `accelerate`, `accelerate launch`, `deepspeed`, `trl`, `tune`) and its
    own words, or None for any other command; nothing is imported."""
    words = list(args)
    name = Path(words[0]).name if words else ""
    if name.startswith("python") and len(words) > 2 and words[1] == "-m" and words[2] in MODULES:
        return MODULES[words[2]], words[3:]
    if name in COMMANDS:
        return COMMANDS[name], words[1:]
    return None


def read(args: Sequence[str], node_gpus: int | None, bf16: bool = True) -> Launch | None:
    """The launch `args` make (`torchrun ...`, `python -m torch.distributed.run ...`, `accelerate launch ...`,
    `deepspeed ...`, `trl sft ...`, `tune run ...`), or None for any other command. `node_gpus`: the GPUs of each
    virtual node when `maya emulate` was told (a launcher that uses "every GPU of the node" uses these; None: as many
    as it asks for, else 1); `bf16`: whether the emulated GPU supports bf16 (accelerate checks it)."""
    found = launcher_of(args)
    if found is None:
        return None
    launcher, words = found
    if launcher == "accelerate":
        if not words or words[0] != "launch":
            raise LaunchCommandError(
                f"accelerate {' '.join(words[:1])}: maya emulate runs `accelerate launch [OPTIONS] SCRIPT ARGS`"
            )
        launcher, words = "accelerate launch", words[1:]
    if launcher == "torchrun":
        return torchrun(words, node_gpus)
    if launcher == "accelerate launch":
        return accelerate(words, node_gpus, bf16)
    if launcher == "trl":
        return trl(words, node_gpus, bf16)
    if launcher == "tune":
        return tune(words, node_gpus)
    return deepspeed(words, node_gpus)


def read_apart(args: Sequence[str], node_gpus: int | None, bf16: bool = True) -> Launch | None:
    """`read` in a short-lived child process of this Python and this maya (its environment and working directory),
    which answers with the launch as JSON in a file of its own: the launcher's imports stay there. Its refusals
    are raised here as the same `LaunchCommandError`; what the launcher prints is written to this process's stderr;
    what its import set in the environment (DeepSpeed's `PYTORCH_NVML_BASED_CUDA_CHECK`) is set here, as the read in
    this process would have. A command that is no launch starts no child."""
    found = launcher_of(args)
    if found is None:
        return None
    with tempfile.TemporaryDirectory(prefix="maya-launch-") as folder:
        answer_file = Path(folder) / "answer.json"
        request = json.dumps({"args": list(args), "node_gpus": node_gpus, "bf16": bf16, "answer": str(answer_file)})
        code = (  # this maya first while it is imported, then the path as the launcher would have it
            f"import sys; sys.path.insert(0, {_MAYA_ROOT!r}); from {__name__} import answer; "
            f"sys.path.remove({_MAYA_ROOT!r}); answer()"
        )
        child = subprocess.run(  # -P: the working directory does not shadow a launcher's modules
            [sys.executable, "-P", "-c", code, request], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        sys.stderr.write(child.stdout)
        try:
            reply = json.loads(answer_file.read_text())
        except (OSError, json.JSONDecodeError):
            status = child.returncode
            ended = f"killed by signal {-status}" if status < 0 else f"exit code {status}"
            output = "its output above" if child.stdout.strip() else "it printed nothing"
            raise LaunchCommandError(
                f"{found[0]}: the process reading the command gave no answer ({ended}; {output})"
            ) from None
    os.environ.update(reply["environ"])
    if "error" in reply:
        raise LaunchCommandError(reply["error"])
    launch = reply["launch"]
    if launch is None:
        return None
    return Launch(**{**launch, **{k: tuple(launch[k]) for k in ("node_rank_variables", "defaults")}})


def answer() -> None:
    """`read_apart`'s child: reads the request (`sys.argv[1]`), writes `{"launch": ...}` or `{"error": ...}` and
    `"environ"` (what the read set in the environment) to the request's answer file."""
    request = json.loads(sys.argv[1])
    sys.argv = [launcher_of(request["args"])[0].split()[0]]  # the parsers' name in their messages, as run
    before = dict(os.environ)
    try:
        launch = read(request["args"], request["node_gpus"], request["bf16"])
        reply: dict[str, Any] = {"launch": None if launch is None else asdict(launch)}
    except LaunchCommandError as e:
        reply = {"error": str(e)}
    reply["environ"] = {k: v for k, v in os.environ.items() if before.get(k) != v and k not in READ_ONLY_VARIABLES}
    Path(request["answer"]).write_text(json.dumps(reply))


@contextmanager
def _named(command: str) -> Iterator[None]:
    """Any exception of a launcher's own code as a LaunchCommandError naming `command` (a parser's refusal, its
    message printed above, included)."""
    try:
        yield
    except LaunchCommandError:
        raise
    except SystemExit as e:
        if e.code in (0, None):  # --help (or --version): printed, and nothing to run
            raise LaunchCommandError(f"{command}: help was asked (printed above); give the command to run") from None
        raise LaunchCommandError(f"{command}: its parser refused these arguments (above)") from None
    except Exception as e:
        raise LaunchCommandError(f"{command}: {type(e).__name__}: {e}") from None


def _script(script: str, module: bool, args: Sequence[str]) -> list[str]:
    return [*(["-m", script] if module else [script]), *args]


def torchrun(words: list[str], node_gpus: int | None = None) -> Launch:
    """`torchrun [OPTIONS] SCRIPT ARGS`, read by torchrun's own parser; `--nproc-per-node gpu|auto` is the node's
    GPUs (`node_gpus`, maya emulate's --nproc-per-node)."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    with _named(f"torchrun {' '.join(words)}"):
        parsed = parser.parse_args(words)
    return _torchrun_launch(parsed, node_gpus, parser=parser)


def _torchrun_launch(parsed: Any, node_gpus: int | None, launcher: str = "torchrun", parser: Any = None) -> Launch:
    """The launch of torchrun's parsed options (`parsed`: what its parser gives, or `tune run`'s copy of them);
    `parser`: torchrun's, for its defaults (None: made here)."""
    if parser is None:
        from torch.distributed.run import get_args_parser

        parser = get_args_parser()
    if parsed.no_python:
        raise LaunchCommandError(f"{launcher} --no-python: maya emulate runs Python scripts (give the script itself)")
    per_node = str(parsed.nproc_per_node)
    if per_node in ("gpu", "auto") and node_gpus:
        per_node = str(node_gpus)
    if not per_node.isdigit() or int(per_node) < 1:
        raise LaunchCommandError(
            f"{launcher} --nproc-per-node {parsed.nproc_per_node}: give the number of GPUs per node (maya emulate's "
            "machine has none to count: maya emulate --nproc-per-node N)"
        )
    nodes = str(parsed.nnodes).rpartition(":")[2]  # MIN:MAX (elastic): the largest job
    if not nodes.isdigit() or int(nodes) < 1:
        raise LaunchCommandError(f"{launcher} --nnodes {parsed.nnodes}: give the number of nodes")
    defaults = tuple(
        f"torchrun's default {what} {parser.get_default(option)}"
        for option, what in (("nnodes", "--nnodes"), ("nproc_per_node", "--nproc-per-node"))
        if getattr(parsed, option) == parser.get_default(option)
    )
    argv = _script(parsed.training_script, parsed.module, parsed.training_script_args)
    return Launch(launcher, argv, int(nodes), int(per_node), defaults=defaults)


@contextmanager
def _virtual_gpus(count: int, bf16: bool) -> Iterator[None]:
    """torch.cuda's answers about the node's GPUs, for a launcher's own checks in this process: `count` GPUs,
    bf16 as the emulated GPU has it."""
    from unittest import mock

    import torch

    with (
        mock.patch.object(torch.cuda, "is_available", lambda: count > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: count),
        mock.patch.object(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16),
    ):
        yield


def _added(env: dict[str, str]) -> dict[str, str]:
    """What a launcher's environment adds to this process's, less what the emulator sets for each rank."""
    return {k: v for k, v in env.items() if os.environ.get(k) != v and k not in RANK_VARIABLES}


def accelerate(words: list[str], node_gpus: int | None, bf16: bool) -> Launch:
    """`accelerate launch [OPTIONS] SCRIPT ARGS`, read by accelerate's parser and its validation (which reads
    `accelerate config`'s file, as `accelerate launch` does); the environment its launcher would give the ranks.
    A launch accelerate's simple launcher runs (no multi-GPU, FSDP, DeepSpeed or Megatron-LM) is one process."""
    try:
        from accelerate.commands.launch import _validate_launch_command, launch_command_parser
        from accelerate.utils import launch as prepare
    except ImportError as e:
        raise LaunchCommandError(
            f"accelerate launch: accelerate is not installed in maya's environment ({e})"
        ) from None
    with _named(f"accelerate launch {' '.join(words)}"):
        args = launch_command_parser().parse_args(words)
    defaults = () if args.num_machines else ("accelerate's default --num_machines 1",)
    machines = args.num_machines or 1
    gpus = node_gpus or (args.num_processes // machines if args.num_processes else 1)
    with _named("accelerate launch"), _virtual_gpus(gpus, bf16):
        args, config, precision_from_config = _validate_launch_command(args)
    for option, refused in (
        ("--cpu", args.cpu),
        ("--tpu", args.tpu),
        ("--no_python", args.no_python),
        ("--mpirun_hostfile", args.mpirun_hostfile),
        ("a SageMaker compute environment", config is not None and config.compute_environment != "LOCAL_MACHINE"),
    ):
        if refused:
            raise LaunchCommandError(f"accelerate launch {option}: maya emulate runs Python scripts on virtual GPUs")
    processes = args.num_processes or 1
    with _named("accelerate launch"):
        if args.use_deepspeed:
            fields = list(config.deepspeed_config) if config else []  # as accelerate's launch_command names them
            args.deepspeed_fields_from_accelerate_config = ",".join(
                [*fields, "mixed_precision"] if precision_from_config else fields
            )
            _, env = prepare.prepare_deepspeed_cmd_env(args)
        elif args.use_fsdp or args.use_megatron_lm or args.multi_gpu:
            env = prepare.prepare_multi_gpu_env(args)
        else:  # accelerate's simple launcher: this one process, whatever --num_processes says
            _, env = prepare.prepare_simple_launcher_cmd_env(args)
            machines = processes = 1
            defaults = ("accelerate's simple launcher: one process (no multi-GPU, FSDP, DeepSpeed or Megatron-LM)",)
    if processes % machines:
        raise LaunchCommandError(f"accelerate launch --num_processes {processes} over {machines} machines: uneven")
    argv = _script(args.training_script, args.module, args.training_script_args)
    return Launch("accelerate launch", argv, machines, processes // machines, _added(env), defaults=defaults)


def trl(words: list[str], node_gpus: int | None, bf16: bool) -> Launch:
    """`trl COMMAND ARGS` for a training command (`sft`, `dpo`, `grpo`, ...): TRL's CLI splits the arguments between
    `accelerate launch` and its script `trl/scripts/COMMAND.py` and launches it in its own process; that launch is
    taken from TRL's own code (nothing runs; its script's parser checks the arguments against the virtual GPUs) and
    read as `accelerate launch` is. Other commands are refused."""
    try:
        from trl.cli import accelerate_launcher
        from trl.cli.commands import get_commands
        from trl.cli.commands.training import TrainingCommand
        from trl.cli.main import main
    except ImportError as e:
        raise LaunchCommandError(
            f"trl: TRL's CLI (trl.cli.accelerate_launcher, TRL 1.0 and later) is not installed in maya's environment "
            f"({e}); give its launch instead: `accelerate launch [OPTIONS] .../trl/scripts/sft.py ARGS`"
        ) from None
    from importlib import resources
    from unittest import mock

    training = sorted(c.name for c in get_commands() if isinstance(c, TrainingCommand))
    if not words or words[0] not in training:
        raise LaunchCommandError(
            f"trl {' '.join(words[:1])}: maya emulate reads TRL's training commands ({', '.join(training)}): "
            "the accelerate launch each makes"
        )
    # transformers' model code imports torchao (where installed), whose import asks the device for its properties:
    # imported before the virtual GPUs' answers (which have no device behind them), it finds none, as its script's
    # config does not need one
    import transformers.modeling_utils  # noqa: F401

    launched: list[list[str]] = []

    def launch_training_script(
        script_name: str, launch_args: list[str], training_script_args: list[str], **_: Any
    ) -> None:
        script = resources.files("trl.scripts").joinpath(script_name)
        launched.append([*launch_args, str(script), *training_script_args])

    with mock.patch.object(accelerate_launcher, "launch_training_script", launch_training_script):
        with (
            _named(f"trl {' '.join(words)}"),
            _virtual_gpus(node_gpus or 1, bf16),  # its script's config checks bf16 and sets its device
            mock.patch("torch.cuda.set_device"),
        ):
            main(words)
    if not launched:
        raise LaunchCommandError(f"trl {words[0]}: TRL's CLI made no launch of its script")
    return replace(accelerate(launched[0], node_gpus, bf16), launcher=f"trl {words[0]}")


def tune(words: list[str], node_gpus: int | None) -> Launch:
    """`tune run [TORCHRUN-OPTIONS] RECIPE --config CONFIG ARGS`, read by torchtune's CLI: it finds the recipe's file
    (a built-in's) or module (a custom one's) and the config's file, then runs the recipe in its own process (no
    torchrun option: one rank, which appends the working directory to `sys.path` as the CLI does) or launches it by
    torchrun (read as torchrun is; several nodes need `--rdzv_endpoint`, without which torchtune's torchrun is
    standalone). The recipe is taken where the CLI would run it; nothing runs. Other `tune` commands are refused."""
    if not words or words[0] != "run":
        raise LaunchCommandError(
            f"tune {' '.join(words[:1])}: maya emulate reads torchtune's `tune run [TORCHRUN-OPTIONS] RECIPE --config "
            "CONFIG ARGS`"
        )
    try:
        from torchtune._cli.run import Run
        from torchtune._cli.tune import TuneCLIParser
    except ImportError as e:
        if e.name and e.name.split(".")[0] == "torchtune":
            raise LaunchCommandError(f"tune: torchtune is not installed in maya's environment ({e})") from None
        raise LaunchCommandError(f"tune: torchtune's CLI failed to import {e.name or 'a module'} ({e})") from None
    from unittest import mock

    launched: list[Launch] = []

    def distributed(_: Run, args: Any, is_builtin: bool) -> None:  # what Run._run_distributed gives torchrun
        args.training_script, args.training_script_args, args.module = args.recipe, args.recipe_args, not is_builtin
        launch = _torchrun_launch(args, node_gpus, "tune run")
        if launch.nnodes > 1 and not args.rdzv_endpoint:
            raise LaunchCommandError(
                f"tune run --nnodes {args.nnodes} without --rdzv_endpoint: torchtune then runs torchrun standalone (a "
                "rendezvous of this node only), so the nodes never meet; give --rdzv_endpoint HOST:PORT"
            )
        launched.append(launch)

    def single_device(_: Run, args: Any, is_builtin: bool) -> None:  # Run._run_single_device: runpy, in-process
        cwd = {settings.EMU_APPEND_PATH.name: os.getcwd()}
        one = ("tune run without torchrun options: the recipe in its own process, one GPU",)
        argv = _script(str(args.recipe), not is_builtin, args.recipe_args)
        launched.append(Launch("tune run", argv, 1, 1, cwd, defaults=one))

    path = list(sys.path)  # the CLI appends the working directory to it
    try:
        with (
            mock.patch.object(Run, "_run_distributed", distributed),
            mock.patch.object(Run, "_run_single_device", single_device),
            mock.patch.object(sys, "argv", ["tune", *words]),  # the CLI counts its torchrun options in sys.argv
            _named(f"tune {' '.join(words)}"),
        ):
            cli = TuneCLIParser()
            cli.run(cli.parse_args())
    finally:
        sys.path[:] = path
    if not launched:
        raise LaunchCommandError(f"tune {' '.join(words)}: torchtune's CLI made no launch of a recipe")
    return launched[0]


def _visible_devices(args: Any, pool: dict[str, int] | None) -> int | None:
    """DeepSpeed's runner's rule: on one node with no resource filter, `CUDA_VISIBLE_DEVICES` is `--include`; the
    number of GPUs it names (None where the rule does not apply)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if pool or not visible or args.include or args.exclude or args.num_nodes > 1 or args.num_gpus > 0:
        return None
    args.include = f"localhost:{visible}"
    return len(visible.split(","))


def deepspeed(words: list[str], node_gpus: int | None) -> Launch:
    """`deepspeed [OPTIONS] SCRIPT ARGS`, read by DeepSpeed's runner: its resource pool (a hostfile's hosts and
    slots, else this node's GPUs), `--num_nodes`/`--num_gpus`/`--include`/`--exclude` on it (and
    `CUDA_VISIBLE_DEVICES`, as its runner reads it), and what its launcher gives each rank: pdsh's (and one node's)
    `deepspeed.launcher.launch` gives `--local_rank=N` and the node's sizes; openmpi, mpich, impi, mvapich and
    slurm give neither."""
    try:
        from deepspeed.launcher import runner
    except ImportError as e:
        raise LaunchCommandError(f"deepspeed: DeepSpeed is not installed in maya's environment ({e})") from None
    with _named(f"deepspeed {' '.join(words)}"):
        args = runner.parse_args(words)
    for option, refused in (
        ("--no_python", args.no_python),
        (f"--autotuning {args.autotuning}", args.autotuning),
        ("--elastic_training", getattr(args, "elastic_training", False)),  # releases before 0.19 have it
    ):
        if refused:
            raise LaunchCommandError(f"deepspeed {option}: not emulated (maya emulate runs one Python job)")
    with _named("deepspeed"):
        pool = runner.fetch_hostfile(args.hostfile) if os.path.isfile(args.hostfile) else None
    visible = _visible_devices(args, pool)
    defaults: tuple[str, ...] = ()
    if not pool:
        if args.num_nodes > 1:
            raise LaunchCommandError(
                f"deepspeed --num_nodes {args.num_nodes}: DeepSpeed takes its nodes from a hostfile (--hostfile, "
                f"{args.hostfile} by default, which does not exist); give one (its hosts are not reached under "
                "maya emulate: every rank runs here)"
            )
        defaults = (f"DeepSpeed's default of one node: no hostfile at {args.hostfile}",)
        pool = {"localhost": args.num_gpus if args.num_gpus > 0 else node_gpus or visible or 1}
    if (args.num_nodes >= 0 or args.num_gpus >= 0) and (args.include or args.exclude):
        raise LaunchCommandError("deepspeed: --num_nodes/--num_gpus cannot be given with --include/--exclude")
    try:
        active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
    except ValueError as e:
        local = (
            "" if "localhost" not in pool else f" (a node of {pool['localhost']} GPUs: maya emulate --nproc-per-node)"
        )
        raise LaunchCommandError(f"deepspeed: {e}{local}") from None
    except Exception as e:
        raise LaunchCommandError(f"deepspeed: {type(e).__name__}: {e}") from None
    hosts = list(active)[: args.num_nodes] if args.num_nodes > 0 else list(active)
    slots = {args.num_gpus if args.num_gpus > 0 else len(active[host]) for host in hosts}
    if len(slots) != 1 or not hosts:
        raise LaunchCommandError(
            f"deepspeed: {', '.join(f'{h}: {len(active[h])}' for h in hosts) or 'no host'} GPUs; maya emulate runs "
            "jobs of the same number of GPUs on every node"
        )
    per_node = slots.pop()
    argv = _script(args.user_script, args.module, args.user_args)
    multi_node = (args.force_multi or len(hosts) > 1) and not args.no_ssh
    env = {"PYTHONPATH": _cwd_first(os.environ.get("PYTHONPATH"))} if multi_node else {}
    if multi_node and args.launcher.lower() != runner.PDSH_LAUNCHER:  # mpirun/srun start the script itself
        return Launch("deepspeed", argv, len(hosts), per_node, env, None, defaults=defaults)
    env |= {"CROSS_SIZE": str(len(hosts)), "LOCAL_SIZE": str(per_node)}
    rank_argument = None if args.no_local_rank else "--local_rank={local_rank}"
    return Launch("deepspeed", argv, len(hosts), per_node, env, rank_argument, ("CROSS_RANK",), defaults)


def _cwd_first(path: str | None) -> str:
    """`PYTHONPATH` as DeepSpeed's multi-node runner gives it: the working directory first."""
    return os.path.abspath(".") + (f":{path}" if path else "")
