"""Launch commands `maya emulate` reads: `torchrun`, `accelerate launch` and `deepspeed`, each by its own parser.

A launcher starts a job's ranks itself; under `maya emulate` the emulator starts them, so a launch command is read
for what it would have given each rank: the script's command (`SCRIPT ARGS` / `-m MODULE ARGS`), the job's shape
(nodes, GPUs per node), the environment the launcher adds (accelerate's `ACCELERATE_*` and `FSDP_*` settings,
DeepSpeed's `CROSS_SIZE`, ...) and an argument it gives each rank's script (DeepSpeed's `--local_rank=N`). Each
launcher's own code reads its options and configuration (accelerate's config file, DeepSpeed's hostfile), so they
mean what they mean to it. What cannot be stood in for fails with `LaunchCommandError`, naming it. No launcher
process runs, and no host of a hostfile is reached: the ranks run here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TORCHRUN_MODULES = ("torch.distributed.run",)
"""`python -m MODULE`: torchrun run as a module."""

RANK_VARIABLES = frozenset(
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"}
)
"""What a launcher sets that the emulator sets for each rank itself (torchrun's environment on its virtual GPUs;
every rank sees the node's GPUs, as `CUDA_VISIBLE_DEVICES` gives them to a real rank; the script's folder is on
the path as `python SCRIPT` puts it)."""


class LaunchCommandError(ValueError):
    """A launch command `maya emulate` cannot stand for (its message says why and what to give instead)."""


@dataclass(frozen=True)
class Launch:
    """What a launch command gives the ranks: the script's command, the job's shape, the environment the launcher
    adds and an argument after the script formatted with each rank's `local_rank` (None: none)."""

    launcher: str
    argv: list[str]
    nnodes: int
    nproc_per_node: int
    env: dict[str, str] = field(default_factory=dict)
    rank_argument: str | None = None


def read(args: Sequence[str], node_gpus: int | None, bf16: bool = True) -> Launch | None:
    """The launch `args` make (`torchrun ...`, `python -m torch.distributed.run ...`, `accelerate launch ...`,
    `deepspeed ...`), or None for any other command. `node_gpus`: the GPUs of each virtual node when `maya emulate`
    was told (a launcher that uses "every GPU of the node" uses these; None: as many as it asks for, else 1);
    `bf16`: whether the emulated GPU supports bf16 (accelerate checks it)."""
    words = list(args)
    name = Path(words[0]).name if words else ""
    if name == "torchrun":
        return torchrun(words[1:])
    if name.startswith("python") and len(words) > 2 and words[1] == "-m" and words[2] in TORCHRUN_MODULES:
        return torchrun(words[3:])
    if name == "accelerate":
        if len(words) < 2 or words[1] != "launch":
            raise LaunchCommandError(
                f"accelerate {' '.join(words[1:2])}: maya emulate runs `accelerate launch [OPTIONS] SCRIPT ARGS`"
            )
        return accelerate(words[2:], node_gpus, bf16)
    if name == "deepspeed":
        return deepspeed(words[1:], node_gpus)
    return None


def _script(script: str, module: bool, args: Sequence[str]) -> list[str]:
    return [*(["-m", script] if module else [script]), *args]


def torchrun(words: list[str]) -> Launch:
    """`torchrun [OPTIONS] SCRIPT ARGS`, read by torchrun's own parser."""
    from torch.distributed.run import get_args_parser

    try:
        parsed = get_args_parser().parse_args(words)
    except SystemExit:
        raise LaunchCommandError(
            f"torchrun {' '.join(words)}: torchrun's parser refused these arguments (above)"
        ) from None
    if parsed.no_python:
        raise LaunchCommandError("torchrun --no-python: maya emulate runs Python scripts (give the script itself)")
    if not str(parsed.nproc_per_node).isdigit() or int(parsed.nproc_per_node) < 1:
        raise LaunchCommandError(
            f"torchrun --nproc-per-node {parsed.nproc_per_node}: give the number of GPUs per node (maya emulate's "
            "machine has none to count)"
        )
    nodes = str(parsed.nnodes).rpartition(":")[2]  # MIN:MAX (elastic): the largest job
    if not nodes.isdigit() or int(nodes) < 1:
        raise LaunchCommandError(f"torchrun --nnodes {parsed.nnodes}: give the number of nodes")
    argv = _script(parsed.training_script, parsed.module, parsed.training_script_args)
    return Launch("torchrun", argv, int(nodes), int(parsed.nproc_per_node))


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
    `accelerate config`'s file, as `accelerate launch` does); the environment its launcher would give the ranks."""
    try:
        from accelerate.commands.launch import _validate_launch_command, launch_command_parser
        from accelerate.utils import launch as prepare
    except ImportError as e:
        raise LaunchCommandError(
            f"accelerate launch: accelerate is not installed in maya's environment ({e})"
        ) from None
    try:
        args = launch_command_parser().parse_args(words)
    except SystemExit:
        raise LaunchCommandError(
            f"accelerate launch {' '.join(words)}: accelerate's parser refused these arguments"
        ) from None
    machines = args.num_machines or 1
    gpus = node_gpus or (args.num_processes // machines if args.num_processes else 1)
    try:
        with _virtual_gpus(gpus, bf16):
            args, defaults, precision_from_config = _validate_launch_command(args)
    except ValueError as e:
        raise LaunchCommandError(f"accelerate launch: {e}") from None
    for option, refused in (
        ("--cpu", args.cpu),
        ("--tpu", args.tpu),
        ("--no_python", args.no_python),
        ("--mpirun_hostfile", args.mpirun_hostfile),
        ("a SageMaker compute environment", defaults is not None and defaults.compute_environment != "LOCAL_MACHINE"),
    ):
        if refused:
            raise LaunchCommandError(f"accelerate launch {option}: maya emulate runs Python scripts on virtual GPUs")
    try:
        if args.use_deepspeed:
            fields = list(defaults.deepspeed_config) if defaults else []  # as accelerate's launch_command names them
            args.deepspeed_fields_from_accelerate_config = ",".join(
                [*fields, "mixed_precision"] if precision_from_config else fields
            )
            _, env = prepare.prepare_deepspeed_cmd_env(args)
        elif args.use_fsdp or args.use_megatron_lm or args.multi_gpu:
            env = prepare.prepare_multi_gpu_env(args)
        else:
            _, env = prepare.prepare_simple_launcher_cmd_env(args)
    except (ValueError, RuntimeError, AssertionError) as e:
        raise LaunchCommandError(f"accelerate launch: {e}") from None
    processes = args.num_processes or 1
    if processes % machines:
        raise LaunchCommandError(f"accelerate launch --num_processes {processes} over {machines} machines: uneven")
    argv = _script(args.training_script, args.module, args.training_script_args)
    return Launch("accelerate launch", argv, machines, processes // machines, _added(env))


def deepspeed(words: list[str], node_gpus: int | None) -> Launch:
    """`deepspeed [OPTIONS] SCRIPT ARGS`, read by DeepSpeed's runner: its resource pool (a hostfile's hosts and
    slots, else this node's GPUs), `--num_nodes`/`--num_gpus`/`--include`/`--exclude` on it, and what its
    `deepspeed.launcher.launch` gives each rank."""
    try:
        from deepspeed.launcher import runner
    except ImportError as e:
        raise LaunchCommandError(f"deepspeed: DeepSpeed is not installed in maya's environment ({e})") from None
    try:
        args = runner.parse_args(words)
    except SystemExit:
        raise LaunchCommandError(f"deepspeed {' '.join(words)}: DeepSpeed's parser refused these arguments") from None
    for option, refused in (
        ("--no_python", args.no_python),
        (f"--autotuning {args.autotuning}", args.autotuning),
        ("--elastic_training", getattr(args, "elastic_training", False)),  # releases before 0.19 have it
    ):
        if refused:
            raise LaunchCommandError(f"deepspeed {option}: not emulated (maya emulate runs one Python job)")
    pool = runner.fetch_hostfile(args.hostfile) if os.path.isfile(args.hostfile) else None
    if not pool:
        if args.num_nodes > 1:
            raise LaunchCommandError(
                f"deepspeed --num_nodes {args.num_nodes}: DeepSpeed takes its nodes from a hostfile (--hostfile, "
                f"{args.hostfile} by default, which does not exist); give one (its hosts are not reached under "
                "maya emulate: every rank runs here)"
            )
        pool = {"localhost": args.num_gpus if args.num_gpus > 0 else node_gpus or 1}
    if (args.num_nodes >= 0 or args.num_gpus >= 0) and (args.include or args.exclude):
        raise LaunchCommandError("deepspeed: --num_nodes/--num_gpus cannot be given with --include/--exclude")
    try:
        active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
    except ValueError as e:
        local = (
            "" if "localhost" not in pool else f" (a node of {pool['localhost']} GPUs: maya emulate --nproc-per-node)"
        )
        raise LaunchCommandError(f"deepspeed: {e}{local}") from None
    hosts = list(active)[: args.num_nodes] if args.num_nodes > 0 else list(active)
    slots = {args.num_gpus if args.num_gpus > 0 else len(active[host]) for host in hosts}
    if len(slots) != 1 or not hosts:
        raise LaunchCommandError(
            f"deepspeed: {', '.join(f'{h}: {len(active[h])}' for h in hosts) or 'no host'} GPUs; maya emulate runs "
            "jobs of the same number of GPUs on every node"
        )
    per_node = slots.pop()
    env = {"CROSS_SIZE": str(len(hosts)), "LOCAL_SIZE": str(per_node)}
    if len(hosts) == 1:  # the node's rank: the same for every rank of a one-node job
        env["CROSS_RANK"] = "0"
    argv = _script(args.user_script, args.module, args.user_args)
    return Launch(
        "deepspeed", argv, len(hosts), per_node, env, None if args.no_local_rank else "--local_rank={local_rank}"
    )
