"""`maya emulate`: run a training script on virtual GPUs, one isolated process per captured rank.

A stop signal (SIGINT, SIGTERM, SIGHUP) to the launcher ends the job as Ctrl-C does: every running rank
is interrupted, no other starts, what the ranks captured is converted and the run's status is `interrupted`
(`emulate` then raises `Interrupted`); a rank still running `STOP_GRACE_S` later, or at a second signal,
is killed."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from maya import __version__
from maya.core import paths, pipeline_stages, settings
from maya.core.hardware import DEFAULT_HARDWARE, Hardware
from maya.core.hardware import get as get_hardware
from maya_trace_spec import RunWriter, read_table

from . import child_processes, dedup, forkserver
from .build import build, built_release, preload_list
from .convert import RankSummary, signature, write_rank
from .dedup import stage_classes
from .device_time import ORACLE_ENV
from .forkserver import RankProcess
from .mailbox import Watcher, mark_ended
from .memory_history import FOLDER as memory_history_folder
from .subset import subset_represents


@dataclass(frozen=True)
class Topology:
    nnodes: int = 1
    nproc_per_node: int = 1

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


@dataclass
class RankCapture:
    """How one emulated rank's capture ended (the simulator's `RankResult` is a replayed rank)."""

    rank: int
    status: str
    exit_code: int
    calls: int
    peak_bytes: int
    unimplemented: dict[str, int]
    error: str | None
    seconds: float
    cpu_seconds: float = 0.0  # of the rank's process
    info: dict = field(default_factory=dict)  # what the rank reported (status.json)
    children: list[dict] = field(default_factory=list)  # processes it started that called the stubs (child_processes)


@dataclass
class EmulationResult:
    run_dir: Path
    status: str
    ranks: list[RankCapture] = field(default_factory=list)
    capture_cpu_seconds: float = 0.0  # of every rank process, verification captures included
    interrupted_by: str | None = None  # the stop signal's name, when one interrupted the run
    stage_rebuild: dict | None = None  # the run's attrs `stage_rebuild` (dedup.py), when the job had enough stages
    dedup: dict | None = None  # the run's attrs `dedup` (classes, refused, unverified), when deduplicated


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 10.0
"""Seconds the ranks get to end their script after a stop signal before they are killed."""


class Interrupted(KeyboardInterrupt):
    """`emulate` was stopped by a signal; `result` is the run, written with what the ranks captured."""

    def __init__(self, result: EmulationResult):
        super().__init__(result.interrupted_by)
        self.result = result

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + signal.Signals[self.result.interrupted_by].value


def nvlinks(hw: Hardware) -> int:
    """NVLinks per GPU (`nvidia-smi topo -m`'s NV#): its NVLink bandwidth over a link's, 50 GB/s both ways from
    NVLink 2 to 4 (V100 6, A100 12, H100 18), 100 GB/s from NVLink 5 (Blackwell, 18), 28.125 GB/s on the
    half-width links of the graphics dies (compute capability x.y, y > 0: the A40's 4)."""
    per_link = 100 if hw.sm_major >= 10 else 50 if hw.sm_minor == 0 else 28.125
    return round(hw.nvlink_gbs / per_link)


def nvlink_bridged(hw: Hardware) -> bool:
    """Whether the GPU's NVLinks join it to one other GPU by a bridge (PCIe cards: the catalog names them `pcie`
    or `nvl`, and the graphics dies, compute capability x.y with y > 0, come only as such) rather than to every
    GPU by NVSwitches (SXM boards). The catalog has no form-factor field: this is what its names and dies say."""
    names = f"{hw.name} {hw.device_name}".lower()
    return hw.nvlink_gbs > 0 and (hw.sm_minor != 0 or re.search(r"pcie|\bnvl\b", names) is not None)


def _config(hw: Hardware, raw: Path, rank: int, devices: int) -> str:
    lines = {
        "out_dir": raw,
        "devices": devices,
        "rank": rank,
        "name": hw.device_name,
        "major": hw.sm_major,
        "minor": hw.sm_minor,
        "sm_count": hw.sm_count,
        "memory_bytes": hw.memory_bytes,
        "clock_khz": hw.boost_clock_mhz * 1000,
        "mem_clock_khz": hw.memory_clock_mhz * 1000,
        "bus_width_bits": hw.memory_bus_width_bits,
        "l2_bytes": hw.l2_bytes,
        "smem_per_sm": hw.shared_mem_per_sm_bytes,
        "smem_per_block_optin": hw.shared_mem_per_block_optin_bytes,
        "max_threads_per_sm": hw.max_threads_per_sm,
        "regs_per_sm": hw.registers_per_sm,
        "power_limit_w": round(hw.tdp_w),
        "nvlinks": nvlinks(hw),
        "nvlink_bridged": int(nvlink_bridged(hw)),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _rank_env(
    lib_dir: Path,
    compile_dir: Path,
    raw: Path,
    mailbox: Path,
    rank: int,
    topo: Topology,
    port: int,
    iterations: int | None,
    device_time: str | None = None,
    extra: Mapping[str, str] | None = None,
    node_rank_variables: Sequence[str] = (),
    launch_command: Sequence[str] | None = None,
    memory_history: Path | None = None,
) -> dict[str, str]:
    env = {**os.environ, **(extra or {}), **{name: str(rank // topo.nproc_per_node) for name in node_rank_variables}}
    env.update(
        {
            "LD_PRELOAD": ":".join(preload_list(lib_dir)),
            "TRITON_LIBCUDA_PATH": str(lib_dir),
            "MAYA_EMU_LIBS": str(lib_dir),
            "MAYA_EMU_CONFIG": str(raw / "config"),
            "MAYA_EMU_OUT": str(raw),
            "MAYA_EMU_MAILBOX": str(mailbox),
            "RANK": str(rank),
            "WORLD_SIZE": str(topo.world_size),
            "LOCAL_RANK": str(rank % topo.nproc_per_node),
            "LOCAL_WORLD_SIZE": str(topo.nproc_per_node),
            "GROUP_RANK": str(rank // topo.nproc_per_node),
            "NODE_RANK": str(rank // topo.nproc_per_node),
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(topo.world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": "maya-emulate",
            "PYTHONUNBUFFERED": "1",
            # torch's jiterator keeps NVRTC's output in ~/.cache/torch/kernels: the emulated NVRTC's placeholder
            # images must not land there (a real GPU run would load them), and each run records its compilations
            "USE_PYTORCH_KERNEL_CACHE": "0",
            # the runner is found as an installed module even when the working directory holds a
            # source tree whose folders would shadow it (as Maya's own checkout does)
            "PYTHONSAFEPATH": "1",
            # the emulated GPU tools (nvidia-smi) come first on PATH
            "PATH": os.pathsep.join([str(lib_dir / "bin"), env.get("PATH", os.defpath)]),
        }
    )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if iterations:
        env["MAYA_EMU_ITERATIONS"] = str(iterations)
    else:
        env.pop("MAYA_EMU_ITERATIONS", None)
    if device_time:
        env[ORACLE_ENV] = device_time
    else:
        env.pop(ORACLE_ENV, None)
    if launch_command is not None:
        env[settings.EMU_LAUNCH.name] = shlex.join(launch_command)
    else:
        env.pop(settings.EMU_LAUNCH.name, None)
    if memory_history is not None:
        env[settings.EMU_MEMORY_HISTORY.name] = str(memory_history)
    else:
        env.pop(settings.EMU_MEMORY_HISTORY.name, None)
    # every rank of a job and every re-run shares Inductor's and Triton's caches (as a real job's ranks
    # share a cache directory), so a kernel is compiled and autotuned once; a user's own directories win
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compile_dir / "inductor"))
    env.setdefault("TRITON_CACHE_DIR", str(compile_dir / "triton"))
    # Inductor compiles in the rank, not in a pool of compile workers: each worker imports torch (a warm run,
    # which compiles nothing, spent 38% of its CPU starting them), and the ranks already use the cores. The
    # kernels are the same either way; a user's own setting wins
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def compile_cache(lib_dir: Path, hw: Hardware, device_time: str | None) -> Path:
    """The compile cache the ranks emulating `hw` under the oracle `device_time` share.

    Keyed by everything a cached artifact depends on: the emulated device as the ranks see it (name,
    compute capability, sizes), the oracle (Inductor's autotuning picks kernels by its timings; None: host
    time), the torch and Triton versions, and the stubs' build (`lib_dir`, keyed by their sources)."""
    key = json.dumps(
        {
            "device": dataclasses.asdict(hw),
            "oracle": device_time,
            "torch": _version("torch"),
            "triton": _version("triton"),
            "stubs": lib_dir.name,
        },
        sort_keys=True,
        default=str,
    )
    return paths.compile_cache_root() / hashlib.sha256(key.encode()).hexdigest()[:16]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def rank_argv(argv: list[str], argument: str | None, local_rank: int) -> list[str]:
    """`argv` (`SCRIPT ARGS` / `-m MODULE ARGS`) with `argument`, formatted with `local_rank`, after the script, as
    DeepSpeed's launcher gives each rank `--local_rank=N`; `argv` itself when `argument` is None."""
    if argument is None:
        return argv
    at = 2 if argv[0] == "-m" else 1
    return [*argv[:at], argument.format(local_rank=local_rank), *argv[at:]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emulate(
    argv: Sequence[str],
    out_dir: Path,
    *,
    hardware: str = DEFAULT_HARDWARE,
    topology: Topology = Topology(),
    ranks: Sequence[int] | None = None,
    parallel: int | None = None,
    on_rank_done: Callable[[RankCapture], None] | None = None,
    on_output: Callable[[str], None] | None = None,
    dedup: bool = True,
    iterations: int | None = None,
    device_time: str | None = None,
    env: Mapping[str, str] | None = None,
    rank_argument: str | None = None,
    node_rank_variables: Sequence[str] = (),
    launch_command: Sequence[str] | None = None,
    memory_history: bool = False,
) -> EmulationResult:
    """Emulate `argv` (`script.py args` or `-m module args`) and write the trace to `out_dir`.

    With `iterations`, every rank stops cleanly once that many training iterations (optimizer steps)
    are done, at the start of the next one (iteration_clock.py). `device_time` names the oracle that answers
    CUDA-event timings (`device_time.spec`; None: host time). `env` adds to (or overrides) this process's
    environment in every rank's, without changing this process's. `rank_argument`, formatted with the rank's
    `local_rank`, is given to each rank's script after its name (`rank_argv`); `node_rank_variables` are set to
    each rank's node index. `launch_command`: the launcher's command they were read from, as typed (None: the
    script was given itself), kept in the run's attrs (`launch`); a rank it started refuses `torch.multiprocessing`
    spawns (spawned_workers.py). With `memory_history`, each captured rank records torch's allocator history and
    writes its snapshot to `out_dir/memory_history/` (memory_history.py).

    Each rank's output goes to `out_dir/logs/rank<N>.txt`; the first captured rank's lines are also
    passed to `on_output` as they come, and so is deduplication's number of classes. With `dedup` and no explicit
    `ranks`, equivalent ranks are captured once (`devices.represents` says which ranks a capture stands for)."""
    hw = get_hardware(hardware)
    wanted = sorted(set(ranks)) if ranks is not None else list(range(topology.world_size))
    bad = [r for r in wanted if not 0 <= r < topology.world_size]
    if bad:
        raise ValueError(f"rank(s) {bad} outside the world of {topology.world_size}")
    out_dir = Path(os.path.abspath(out_dir))  # the ranks' children (a build a script starts) may run in other folders
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir}: output exists and is not empty")
    lib_dir = build(settings.emulator_cache())
    job = _Job(
        list(argv),
        out_dir,
        hw,
        topology,
        lib_dir,
        compile_cache(lib_dir, hw, device_time),
        iterations,
        on_output if wanted else None,
        on_rank_done,
        wanted[0] if wanted else -1,
    )
    job.device_time = device_time
    job.env = dict(env or {})
    job.rank_argument = rank_argument
    job.node_rank_variables = tuple(node_rank_variables)
    job.launch_command = None if launch_command is None else list(launch_command)
    job.memory_history = out_dir / memory_history_folder if memory_history else None
    if wanted and forkserver.enabled():  # the zygote imports torch while this process writes the run's first row
        forkserver.prestart(job.rank_env(wanted[0], out_dir / ".capture" / f"rank{wanted[0]}"))
    job.write_run("running", {"captured_ranks": wanted})
    workers = parallel or os.cpu_count() or 1
    with _stop_signals_to(job.stopping.handle):
        with Watcher(job.mailbox, topology.world_size, job.start):
            if dedup and ranks is None and topology.world_size > 1:
                if workers > 1:  # the last rank, the likely check of the last class (dedup.py), beside rank 0
                    job.start(topology.world_size - 1, ahead=True)
                captured, represents, job.stage_rebuild, job.dedup = _deduplicated(
                    job.capture, job.writer, topology.world_size, workers, on_rank_done, list(argv), on_output
                )
            else:
                with ThreadPoolExecutor(min(len(wanted), workers)) as pool:
                    captured = {r: c for r, c in zip(wanted, pool.map(job.capture, wanted)) if c is not None}
                represents = {rank: [rank] for rank in captured}
                if ranks is not None and len(wanted) < topology.world_size:
                    represents, job.assumed, job.dedup = _subset(job.writer, topology.world_size, captured)
            job.wait_for_all()
        result = job.finish(captured, represents)  # once the mailbox's watcher is gone: it removes the capture
    if result.interrupted_by:
        raise Interrupted(result)
    if job.stopping.by:  # it came once the run was written whole: its own action, now
        signal.raise_signal(signal.Signals[job.stopping.by])
    return result


@contextmanager
def _stop_signals_to(handle: Callable[[int, object], None]) -> Iterator[None]:
    """Within, a stop signal to this process goes to `handle` (`_Stopping.handle`) instead of ending it; only
    where Python handles signals (the main thread), and not a signal ignored (`nohup`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _subset(writer: RunWriter, world_size: int, captured: dict[int, tuple[Path, RankCapture]]):
    """Which uncaptured ranks the captured subset stands for (subset.py), read from the first complete
    capture's tables, and the run's `dedup` attrs; none when no capture completed, or when its layout cannot be read
    (`dedup.LayoutError`, whose reason the attrs keep as `refused`)."""
    done = [rank for rank, (_, result) in sorted(captured.items()) if result.status == "complete"]
    alone = {rank: [rank] for rank in captured}
    if not done:
        return alone, {}, None
    try:
        return (*subset_represents(world_size, sorted(captured), *_layout_tables(writer, done[0])), None)
    except dedup.LayoutError as e:
        return alone, {}, {"refused": f"the captured ranks stand for no others: {e}"}


def _layout_tables(writer: RunWriter, rank: int):
    """`rank`'s captured `api_calls`, `communicators` and `ops`, only the columns `dedup.layout_of` reads
    (`dedup.LAYOUT_COLUMNS`)."""
    return tuple(
        read_table(writer.run_dir, name, [rank], dedup.LAYOUT_COLUMNS.get(name)) for name in dedup.LAYOUT_TABLES
    )


class _Stopping:
    """How a job stops on a signal: the running ranks are interrupted (SIGINT: each ends its script and keeps
    its capture) and none starts any more (`by` is set); at a second signal, or `grace_s` later, they are
    killed."""

    def __init__(self, grace_s: float = STOP_GRACE_S):
        self.by: str | None = None  # the name of the stop signal received
        self.grace_s = grace_s
        self.killing = False
        self.processes: dict[int, RankProcess] = {}  # of the ranks running
        self.doomed: set[int] = set()  # ranks to kill as they start (`kill_rank`)
        self.lock = threading.RLock()  # re-entrant: the signal handler runs in the main thread, between any two lines

    def handle(self, signum: int, frame: object = None) -> None:
        """The stop signals' handler."""
        with self.lock:
            first = self.by is None
            if first:
                self.by = signal.Signals(signum).name
            else:
                self.killing = True
            processes = list(self.processes.values())
        if first:
            timer = threading.Timer(self.grace_s, self.kill)
            timer.daemon = True
            timer.start()
        for process in processes:
            process.send_signal(signal.SIGKILL if self.killing else signal.SIGINT)

    def kill(self) -> None:
        with self.lock:
            self.killing = True
            processes = list(self.processes.values())
        for process in processes:
            process.send_signal(signal.SIGKILL)

    def kill_rank(self, rank: int) -> None:
        """Kill one rank's process (a rank started ahead that nothing asked for), now or as soon as it starts."""
        with self.lock:
            self.doomed.add(rank)
            process = self.processes.get(rank)
        if process is not None:
            process.send_signal(signal.SIGKILL)

    def started(self, rank: int, process: RankProcess) -> None:
        """A rank's process, to signal until it ends; one started as the job stops is stopped at once."""
        with self.lock:
            self.processes[rank] = process
            by, killing = self.by, self.killing or rank in self.doomed
        if by or killing:
            process.send_signal(signal.SIGKILL if killing else signal.SIGINT)

    def ended(self, rank: int) -> None:
        with self.lock:
            self.processes.pop(rank, None)


class _Job:
    """One `emulate` call: its ranks' processes, each started once, and the run directory they fill."""

    def __init__(
        self,
        argv: list[str],
        out_dir: Path,
        hw: Hardware,
        topology: Topology,
        lib_dir: Path,
        compile_dir: Path,
        iterations: int | None,
        on_output: Callable[[str], None] | None,
        on_rank_done: Callable[[RankCapture], None] | None,
        echoed_rank: int,
    ):
        self.argv, self.out_dir, self.hw, self.topology = argv, out_dir, hw, topology
        self.lib_dir, self.iterations = lib_dir, iterations
        self.compile_dir = compile_dir  # the ranks' shared Inductor and Triton caches (compile_cache)
        self.on_output, self.on_rank_done, self.echoed_rank = on_output, on_rank_done, echoed_rank
        self.writer = RunWriter(out_dir)
        self.mailbox = out_dir / ".capture" / "mailbox"
        self.port = _free_port()
        self.run_row = {
            "run_id": uuid.uuid4().hex,
            "created_at_ns": time.time_ns(),
            "source": "emulator",
            "command": json.dumps(["python", *argv]),
            "hardware": hw.name,
            "world_size": topology.world_size,
            "nnodes": topology.nnodes,
            "nproc_per_node": topology.nproc_per_node,
            "producer_version": f"maya {__version__}",
            "cuda_version": built_release(lib_dir)["version"],
        }
        self.runs: dict[int, Future] = {}
        self.requested: set[int] = set()  # ranks asked for (a capture, a peer); the others were started ahead
        self.lock = threading.Lock()
        self.device_time: str | None = None  # the oracle answering CUDA-event timings (device_time.py)
        self.assumed: dict[int, list[int]] = {}  # uncaptured ranks a subset's capture stands for (subset.py)
        self.stage_rebuild: dict | None = None  # interior pipeline stages rebuilt from stage 1 (dedup.py)
        self.dedup: dict | None = None  # the classes of equivalent ranks, and what was not verified (dedup.py)
        self.env: dict[str, str] = {}  # added to every rank's environment
        self.rank_argument: str | None = None  # given to each rank's script after its name (rank_argv)
        self.node_rank_variables: tuple[str, ...] = ()  # set to each rank's node index
        self.launch_command: list[str] | None = None  # the launcher's command as typed (None: `python SCRIPT`)
        self.memory_history: Path | None = None  # where the ranks write torch's allocator history (memory_history.py)
        self.stopping = _Stopping()

    def write_run(self, status: str, attrs: dict) -> None:
        if self.device_time:
            attrs = {**attrs, "device_time": json.loads(self.device_time)}
        if self.launch_command is not None:
            attrs = {**attrs, "launch": self.launch()}
        self.writer.write(
            "run",
            {
                k: [v]
                for k, v in {
                    **self.run_row,
                    "status": status,
                    "attrs": json.dumps({**attrs, "iterations_limit": self.iterations}),
                }.items()
            },
        )

    def launch(self) -> dict:
        """The run's attrs `launch`: the launcher's command as typed and what was read from it for the ranks."""
        return {
            "command": self.launch_command,
            "env": self.env,
            "rank_argument": self.rank_argument,
            "node_rank_variables": list(self.node_rank_variables),
        }

    def rank_env(self, rank: int, raw: Path) -> dict[str, str]:
        """The environment of `rank`'s process, whose capture goes to `raw`."""
        return _rank_env(
            self.lib_dir,
            self.compile_dir,
            raw,
            self.mailbox,
            rank,
            self.topology,
            self.port,
            self.iterations,
            self.device_time,
            self.env,
            self.node_rank_variables,
            self.launch_command,
            self.memory_history,
        )

    def run_rank(self, rank: int) -> tuple[Path, RankCapture]:
        """Run one rank's process to its end and summarise its capture."""
        raw = self.out_dir / ".capture" / f"rank{rank}"
        raw.mkdir(parents=True)
        (raw / "config").write_text(_config(self.hw, raw, rank, self.topology.nproc_per_node))
        t0 = time.monotonic()
        env = self.rank_env(rank, raw)
        try:
            returncode = _run_rank(
                rank_argv(self.argv, self.rank_argument, rank % self.topology.nproc_per_node),
                env,
                self.out_dir / "logs" / f"rank{rank}.txt",
                echo=self.on_output if rank == self.echoed_rank else None,
                started=lambda process: self.stopping.started(rank, process),
            )
        finally:
            self.stopping.ended(rank)
            mark_ended(self.mailbox, rank)
        summary = RankSummary.scan(raw)
        return raw, RankCapture(
            rank,
            summary.status["status"],
            returncode,
            summary.calls,
            summary.peak_bytes,
            summary.unimplemented,
            summary.status.get("error"),
            time.monotonic() - t0,
            summary.status.get("cpu_s", 0.0),
            summary.status,
            child_processes.read(raw),
        )

    def start(self, rank: int, ahead: bool = False) -> Future:
        """The emulation of `rank`, started once (by a request, because a peer waits for it, or `ahead` of a request
        that is likely to come); its result is None when the job was stopped before it started."""
        with self.lock:
            if not ahead:
                self.requested.add(rank)
            if rank not in self.runs:
                future: Future = Future()
                self.runs[rank] = future
                if self.stopping.by:
                    future.set_result(None)
                else:
                    threading.Thread(
                        target=self._resolve, args=(future, rank), name=f"maya-rank{rank}", daemon=True
                    ).start()
            return self.runs[rank]

    def _resolve(self, future: Future, rank: int) -> None:
        try:
            future.set_result(self.run_rank(rank))
        except BaseException as e:
            future.set_exception(e)

    def capture(self, rank: int, keep: bool = True) -> tuple[Path, RankCapture] | None:
        """`rank`'s capture (started if needed), written into the run unless `keep` is False (a probe); None
        when the job was stopped before the rank started."""
        ran = self.start(rank).result()
        if ran is None:
            return None
        raw, result = ran
        if keep:
            write_rank(raw, self.writer, rank)
            if self.on_rank_done:
                self.on_rank_done(result)
        return raw, result

    def wait_for_all(self) -> None:
        """Wait for ranks started only because a peer waited for them; a rank started ahead that nothing asked for is
        stopped (SIGKILL), and neither its capture nor its log is kept."""
        with self.lock:
            unasked = [rank for rank in self.runs if rank not in self.requested]
        for rank in unasked:
            self.stopping.kill_rank(rank)
        for future in list(self.runs.values()):
            future.exception()
        for rank in unasked:
            (self.out_dir / "logs" / f"rank{rank}.txt").unlink(missing_ok=True)

    def finish(
        self, captured: dict[int, tuple[Path, RankCapture]], represents: dict[int, list[int]]
    ) -> EmulationResult:
        """The devices table, the run's final row and status, and the raw captures removed when complete."""
        hw, topology = self.hw, self.topology
        for rank, (_, result) in sorted(captured.items()):
            local = rank % topology.nproc_per_node
            self.writer.write(
                "devices",
                {
                    k: [v]
                    for k, v in {
                        "local_rank": local,
                        "node": rank // topology.nproc_per_node,
                        "device_index": local,
                        "device_name": hw.device_name,
                        "hardware": hw.name,
                        "sm_major": hw.sm_major,
                        "sm_minor": hw.sm_minor,
                        "sm_count": hw.sm_count,
                        "memory_bytes": hw.memory_bytes,
                        "represents": represents[rank],
                        "hostname": socket.gethostname(),
                        "pid": result.info.get("pid"),
                    }.items()
                },
                rank=rank,
            )
        results = [captured[r][1] for r in sorted(captured)]
        torch = next((r.info["torch"] for r in results if r.info.get("torch")), None)
        self.run_row["framework"] = f"torch {torch}" if torch else None
        interrupted_by = self.stopping.by or next(
            (r.info.get("interrupted_by") or "SIGINT" for r in results if r.status == "interrupted"), None
        )
        status = (
            "oom"
            if any(r.status == "oom" for r in results)
            else "interrupted"
            if interrupted_by
            else "failed"
            if any(r.status == "failed" for r in results)
            else "complete"
        )
        self.write_run(
            status,
            {
                "captured_ranks": sorted(captured),
                "rank_status": {r.rank: r.status for r in results},
                **(
                    {
                        "interrupted_by": interrupted_by,
                        "interrupted_ranks": [r.rank for r in results if r.status not in ("complete", "oom")],
                    }
                    if interrupted_by
                    else {}
                ),
                "represents": represents,
                **({"represents_assumed": self.assumed} if self.assumed else {}),
                **({"stage_rebuild": self.stage_rebuild} if self.stage_rebuild else {}),
                **({"dedup": self.dedup} if self.dedup else {}),
                "stopped_at_iteration": {
                    r.rank: r.info.get("stopped_at_iteration") for r in results if r.info.get("stopped_at_iteration")
                },
                "routing_stand_ins": {
                    r.rank: r.info["host_values"]["routing"]
                    for r in results
                    if r.info.get("host_values", {}).get("routing")
                },
                "allocator_peaks": {r.rank: r.info["allocator"] for r in results if r.info.get("allocator")},
                **(
                    {"child_processes": {r.rank: r.children for r in results if r.children}}
                    if any(r.children for r in results)
                    else {}
                ),
                **(
                    {"device_time_answers": {r.rank: r.info.get("device_time") for r in results}}
                    if self.device_time
                    else {}
                ),
            },
        )
        if status in ("complete", "interrupted") and not settings.keep_capture():
            shutil.rmtree(self.out_dir / ".capture", ignore_errors=True)  # converted
        cpu = sum(f.result()[1].cpu_seconds for f in self.runs.values() if f.exception() is None and f.result())
        return EmulationResult(self.out_dir, status, results, cpu, interrupted_by, self.stage_rebuild, self.dedup)


IN_TURNS = "the classes are captured in turns (the pipeline's end stages first, for the stage rebuild)"
"""Why classes checked before the others are captured are not split (`_capture_classes`)."""


def _deduplicated(capture, writer: RunWriter, world_size: int, workers: int, on_rank_done, argv: list[str], on_output):
    """Capture one representative per class of equivalent ranks (dedup.py), checked by one more member per class
        unless rank 0's groups say otherwise (`dedup.checked`, `_capture_classes`); returns the captures
        kept, which ranks each stands for (ranks a stop signal kept from starting are left out), the run's
        `stage_rebuild` attrs (None when the job has too few pipeline stages) and its `dedup` attrs (the number of
        classes; `refused`: why every rank was captured, when rank 0's layout cannot be read; `unverified`:
        representative -> the member whose calls differ, where the classes could not all be split alike, and
        `unverified_reason`: why), the number of classes (or the refusal) also given to `on_output` before the other
        ranks are captured.

        With `dedup.REBUILT_FROM` pipeline stages or more, stages 0, 1, 2, `P - 2` and `P - 1` are captured first; when
        stages 2 and `P - 2` rebuilt from stage 1's capture are their captures and every interior stage can be rebuilt
        (`_rebuild_difference`), stages 3 to `P - 3` are left to be rebuilt when the run is read, else they are captured
        too, as they are when `argv` sets an option that can give the stages different layers (or, under the interleaved
    schedule, one that places work by the stage: `pipeline_stages.INTERLEAVED_ORDER_OPTIONS`). Under Megatron-LM's
        interleaved schedule odd stages are rebuilt from stage 1 and even ones from stage 2
        (`pipeline_stages.INTERLEAVED_SOURCES`): stage `P - 3` is captured too, and stages `P - 3` and `P - 2` (one of
        each parity) are the ones checked, so stages 3 to `P - 4` are rebuilt. When every stage is captured before any
        is checked (an option of `argv`, or ranks that also exchange within the model's passes), the `stage_rebuild`
        attrs give only the stages, their stride and the reason (`refused`)."""
    first = capture(0)
    if first is None:
        return {}, {}, None, None
    captured = {0: first}
    if first[1].status != "complete":
        return captured, {0: [0]}, None, None
    tables = _layout_tables(writer, 0)
    communicators = tables[1]
    try:
        layout = dedup.layout_of(*tables)
    except dedup.LayoutError as e:
        if on_output:
            on_output(f"maya: deduplication refused, capturing all {world_size} ranks: {e}\n")
        alone = {rank: [rank] for rank in range(world_size)}
        represents = _capture_classes(capture, writer, alone, captured, workers, on_rank_done, False, None, {})
        return captured, represents, None, {"classes": world_size, "refused": f"every rank captured: {e}"}
    pipeline = layout.pipeline
    classes = stage_classes(world_size, layout)
    check = dedup.checked(classes, communicators)
    crossing = dedup.crossing(classes, communicators)
    crossing = crossing and f"{crossing}: split alike, that group's members would be misaligned in the replay"
    if on_output:
        on_output(f"maya: {len(classes)} class(es) of equivalent ranks among {world_size}: capturing one of each\n")
    noted: dict = {"classes": len(classes)}  # the run's `dedup` attrs

    def some(chosen: dict[int, list[int]], whole: bool = False) -> dict[int, list[int]]:
        no_split = crossing if whole else IN_TURNS
        return _capture_classes(capture, writer, chosen, captured, workers, on_rank_done, check, no_split, noted)

    if pipeline is None or pipeline.stages < dedup.REBUILT_FROM:
        return captured, some(classes, whole=True), None, noted
    reps = [stage * pipeline.stride for stage in range(pipeline.stages)]
    checked = [2, pipeline.stages - 2]
    ends = [reps[0], reps[1], *(reps[s] for s in checked), reps[-1]]
    axis = {"stages": pipeline.stages, "stride": pipeline.stride}
    attrs = {**axis, "from": 1, "checked": checked}
    option = pipeline_stages.differing_stage_options(argv)
    refused = (
        f"{option} can give the pipeline stages different layers"
        if option
        else f"ranks also exchange within the model's passes ({_exchange_groups(layout)}): a stage is more than one "
        "class of ranks, and stage 1's exchanges are not the schedule's alone"
        if layout.exchanges
        else None
    )
    if refused:
        return captured, some(classes, whole=True), {**axis, "refused": refused}, noted
    represents = some({r: classes[r] for r in ends})
    try:
        if _interleaved(writer, pipeline, captured, argv):
            checked = [pipeline.stages - 3, pipeline.stages - 2]
            sources = list(pipeline_stages.INTERLEAVED_SOURCES)
            attrs.update({"from": sources, "checked": checked, "schedule": "interleaved"})
            option = pipeline_stages.given_option(argv, pipeline_stages.INTERLEAVED_ORDER_OPTIONS)
            if option:
                raise pipeline_stages.ScheduleError(
                    f"under the interleaved schedule {option} {pipeline_stages.INTERLEAVED_ORDER_OPTIONS[option]}: "
                    "the stages' order differs by more than their warm-up"
                )
            more = {reps[s]: classes[reps[s]] for s in checked if reps[s] not in ends}
            represents.update(some(more))
        microbatches = _rebuild_difference(writer, pipeline, captured, represents, attrs["from"], checked)
    except pipeline_stages.ScheduleError as e:
        rest = {r: classes[r] for r in reps if r not in captured}
        represents.update(some(rest))
        return captured, represents, {**attrs, "refused": str(e)}, noted
    rebuilt = [s for s in range(3, pipeline.stages - 2) if s not in checked]
    ranks = sorted(r for r in range(world_size) if pipeline.stage(r) in rebuilt)
    attrs.update(
        {
            "microbatches": microbatches,
            "rebuilt": rebuilt,
            "rebuilt_ranks": ranks,
            "rule": pipeline_stages.rule_digest(),
        }
    )
    if not rebuilt:  # 6 stages interleaved: 1 and 2 are the sources, 3 and 4 the checked ones
        attrs["reason"] = (
            f"with {pipeline.stages} stages under the interleaved schedule every interior stage is a source (1, 2) "
            f"or checked ({' and '.join(str(s) for s in checked)}): none is left to rebuild"
        )
    return captured, represents, attrs, noted


def _exchange_groups(layout: dedup.Layout) -> str:
    """The layout's exchange groups in words (their sizes and strides), for the run's attrs."""
    return ", ".join(f"a group of {axis.stages} ranks {axis.stride} apart" for axis in layout.exchanges)


def _interleaved(writer: RunWriter, pipeline: pipeline_stages.Pipeline, captured, argv: list[str]) -> bool:
    """Whether stage 1's first rank runs Megatron-LM's interleaved schedule (`pipeline_stages.split`); ScheduleError
    when its capture is not complete or follows no schedule that can be rebuilt (naming the option of `argv` that
    makes it so, `pipeline_stages.INTERLEAVED_UNSUPPORTED`)."""
    rank = pipeline.stride
    if captured[rank][1].status != "complete":
        raise pipeline_stages.ScheduleError(f"rank {rank}'s capture is {captured[rank][1].status}")
    calls, communicators = (
        read_table(writer.run_dir, name, [rank]).to_pandas() for name in ("api_calls", "communicators")
    )
    try:
        cut = pipeline_stages.split(calls.sort_values("seq", ignore_index=True), communicators, pipeline, 1)
    except pipeline_stages.ScheduleError as e:
        option = pipeline_stages.given_option(argv, pipeline_stages.INTERLEAVED_UNSUPPORTED)
        if option:
            raise pipeline_stages.ScheduleError(
                f"{option}: {pipeline_stages.INTERLEAVED_UNSUPPORTED[option]} ({e})"
            ) from e
        raise
    return cut.extra is not None


def _capture_classes(
    capture,
    writer: RunWriter,
    classes,
    captured,
    workers: int,
    on_rank_done,
    check: bool,
    no_split: str | None,
    found: dict,
):
    """Capture the representatives of `classes` not in `captured` yet (adding them there) and, with `check`, the last
    member of each class of more than one rank; returns which ranks each kept capture of these classes stands for.

    When a last member's calls differ from its representative's (`convert.signature`: rank 0 logging, say), nothing
    says why not (`no_split`: `classes` are not the job's whole set, or a group crosses them, `dedup.crossing`) and
    every class of `classes` was compared, every class is split alike: its representative stands for itself and its
    last member for the rest, so that the lists of all classes stay aligned (`simulator/topology.py` maps another
    class's member by its position in that class's list: splitting one class alone made a CP 4 x DP 4 replay
    deadlock). Otherwise no class is split: each differing member is added to `found["unverified"]`
    (representative -> that member) and the reason to `found["unverified_reason"]`."""
    checks = {rep: max(members) for rep, members in classes.items() if check and len(members) > 1}
    with ThreadPoolExecutor(workers) as pool:
        others = [r for r in classes if r not in captured]
        captured.update((r, c) for r, c in zip(others, pool.map(capture, others)) if c is not None)
        probes = dict(zip(checks.values(), pool.map(lambda r: capture(r, keep=False), checks.values())))
    represents = {rep: list(members) for rep, members in classes.items() if rep in captured}
    compared, differing = [], []
    for rep, last in checks.items():
        probe = probes[last]
        if probe is None or rep not in captured or "interrupted" in (probe[1].status, captured[rep][1].status):
            continue  # not both whole: nothing to compare
        compared.append(rep)
        if signature(probe[0]) != signature(captured[rep][0]):
            differing.append(rep)
    if not differing:
        return represents
    reason = no_split or (None if len(compared) == len(classes) else "a check's capture did not complete")
    if reason:
        found.setdefault("unverified", {}).update((rep, checks[rep]) for rep in differing)
        previous = found.get("unverified_reason")
        found["unverified_reason"] = reason if previous in (None, reason) else f"{previous}; {reason}"
        return represents
    for rep, last in checks.items():
        raw, result = probes[last]
        write_rank(raw, writer, last)
        if on_rank_done:
            on_rank_done(result)
        captured[last] = (raw, result)
        represents[last] = [last] + [r for r in represents[rep] if r not in (rep, last)]
        represents[rep] = [rep]
    return represents


def _rebuild_difference(
    writer: RunWriter,
    pipeline: pipeline_stages.Pipeline,
    captured,
    represents,
    sources: int | list[int],
    checked: list[int],
) -> int:
    """Each `checked` stage rebuilt from each capture of its source stage (`sources`: stage 1, or one stage per
    parity under the interleaved schedule, `pipeline_stages.source`), compared with that stage's capture of the same
    part (`pipeline_stages.difference`), and every interior stage shown rebuildable (`check_rebuilds`); returns the
    micro-batches a step (the interleaved schedule's virtual ones), or raises ScheduleError saying why the sources'
    captures cannot stand for the interior stages (a capture not complete, the stages split into other classes of
    ranks, a schedule neither 1F1B nor interleaved with overlapped point-to-point communication, too few micro-batches
    for a stage's steady state, a difference, sources that run different steps)."""
    sources = [sources] if isinstance(sources, int) else sources
    for stage in checked:
        origin = pipeline_stages.source(stage, sources)
        ours = {rank: members for rank, members in represents.items() if pipeline.stage(rank) == origin}
        theirs = {rank: members for rank, members in represents.items() if pipeline.stage(rank) == stage}
        shift = stage - origin
        moved = {pipeline.translate(r, shift): [pipeline.translate(m, shift) for m in ms] for r, ms in ours.items()}
        if moved != theirs:
            raise pipeline_stages.ScheduleError(
                f"stages {origin} and {stage} split into different classes of ranks ({sorted(ours)} and "
                f"{sorted(theirs)})"
            )
    counts = {}
    for origin in sources:
        mine = [stage for stage in checked if pipeline_stages.source(stage, sources) == origin]
        for rank in sorted(r for r in represents if pipeline.stage(r) == origin):
            counts[rank] = _rebuild_checked(writer, pipeline, captured, rank, mine, interleaved=len(sources) > 1)
    if len(set(counts.values())) > 1:
        raise pipeline_stages.ScheduleError(
            "the sources run different steps ((micro-batches, warm-up constant) by rank: "
            f"{', '.join(f'{r}: {c}' for r, c in sorted(counts.items()))})"
        )
    return next(iter(counts.values()))[0]


def _rebuild_checked(
    writer: RunWriter, pipeline: pipeline_stages.Pipeline, captured, rank: int, checked: list[int], interleaved: bool
) -> tuple[int, int | None]:
    """`rank`'s counterparts in the `checked` stages rebuilt from its capture and compared with their own
    (`_rebuild_difference`); returns the micro-batches a step and the interleaved schedule's warm-up constant (None
    for 1F1B: `pipeline_stages.Split`)."""
    origin = pipeline.stage(rank)
    others = [pipeline.translate(rank, stage - origin) for stage in checked]
    for r in (rank, *others):
        if captured[r][1].status != "complete":
            raise pipeline_stages.ScheduleError(f"rank {r}'s capture is {captured[r][1].status}")
    tables = {
        r: [read_table(writer.run_dir, name, [r]).to_pandas() for name in ("api_calls", "communicators", "kernels")]
        for r in (rank, *others)
    }
    calls, communicators, kernels = tables[rank]
    calls = calls.sort_values("seq", ignore_index=True)
    cut = pipeline_stages.split(calls, communicators, pipeline, origin)
    if (cut.extra is not None) != interleaved:
        raise pipeline_stages.ScheduleError(f"rank {rank} runs another pipeline schedule than stage 1's first rank")
    pipeline_stages.check_rebuilds(cut, pipeline.stages)
    for stage, other in zip(checked, others):
        own, own_comms, own_kernels = tables[other]
        reason = pipeline_stages.rebuilt_difference(
            calls,
            communicators,
            pipeline,
            cut,
            stage,
            (own.sort_values("seq", ignore_index=True), own_comms),
            (
                dict(zip(kernels["kernel_id"], kernels["name"])),
                dict(zip(own_kernels["kernel_id"], own_kernels["name"])),
            ),
        )
        if reason:
            raise pipeline_stages.ScheduleError(
                f"stage {stage} rebuilt from rank {rank}'s capture is not rank {other}'s: {reason}"
            )
    return cut.microbatches, cut.extra


def _run_rank(
    argv: list[str],
    env: dict[str, str],
    log: Path,
    echo: Callable[[str], None] | None,
    started: Callable[[RankProcess], None],
) -> int:
    """Run one rank (`python -m maya.emulator.runner ARGV`), forked from the zygote unless it
    is turned off or cannot start; its process goes to `started` (to signal while it runs), its output to
    `log` and, line by line, to `echo`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:

        def output(line: str) -> None:
            fh.write(line)
            if echo:
                echo(line)

        if forkserver.enabled():
            try:
                with forkserver.lease(env) as server:
                    return server.run(argv, env, output, started)
            except forkserver.ZygoteUnavailable as e:
                warnings.warn(f"{e}; ranks start as new processes", RuntimeWarning, stacklevel=2)
        cmd = [sys.executable, "-m", "maya.emulator.runner", *argv]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        process = RankProcess(os.pidfd_open(proc.pid))  # before any wait: the pid is still this child's
        try:
            with proc:
                started(process)
                for line in proc.stdout:
                    output(line)
        finally:
            process.close()
        return proc.returncode
