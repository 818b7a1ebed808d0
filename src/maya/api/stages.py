"""The use cases that span the stages: `capture` a script on virtual GPUs, `predict` a run (no side effect; `replay`
keeps the replays with the prediction) and `record` a prediction in the warehouse, each configured by a frozen
options object. Every driver (the CLI, the demo, search, validation, the pipelines) goes through these; none
composes the stages itself."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from maya.core.hardware import DEFAULT_HARDWARE

if TYPE_CHECKING:
    from maya.emulator.capture_cache import CaptureCache
    from maya.emulator.launcher import EmulationResult, RankCapture
    from maya.simulator import DurationProvider, Prediction
    from maya.simulator.oom import OutOfMemory
    from maya.simulator.predict import Replay

DEVICE_TIME_CHOICES = ("estimators", "roofline", "host")
"""What CUDA-event timings read in the emulated ranks (`maya emulate --device-time`)."""
DURATION_CHOICES = ("auto", "estimators", "roofline", "measured")
"""Where a prediction's durations come from (`maya predict --durations`)."""


@dataclass(frozen=True)
class EmulateOptions:
    """How to capture a script (what `maya emulate` takes). `iterations` None runs the script to its end;
    `device_time` 'host' times CUDA events by host time (the oracle choices: `DEVICE_TIME_CHOICES`, priced by
    `estimator_version`); `env` is added to every rank's environment (a mapping, kept as sorted pairs)."""

    hardware: str = DEFAULT_HARDWARE
    nnodes: int = 1
    nproc_per_node: int = 1
    ranks: tuple[int, ...] | None = None
    """Ranks to capture (None: all; the others replay a captured rank of their pipeline stage)."""
    dedup: bool = True
    iterations: int | None = None
    device_time: str = "host"
    estimator_version: str = "latest"
    env: tuple[tuple[str, str], ...] | Mapping[str, str] = field(default=())
    rank_argument: str | None = None
    """An argument given to each rank's script after its name, formatted with the rank's `local_rank` (DeepSpeed's
    launcher gives `--local_rank={local_rank}`); None: none."""
    node_rank_variables: tuple[str, ...] = ()
    """Environment variables set to each rank's node index (DeepSpeed's launcher sets `CROSS_RANK`)."""
    launch_command: tuple[str, ...] | None = None
    """The launcher's command as the user typed it (`torchrun ...`, `deepspeed ...`), which `env`, `rank_argument`
    and `node_rank_variables` were read from: kept in the run's attrs (`launch`), and a `torch.multiprocessing`
    spawn in a rank it started is refused; None: the script was given itself (`python SCRIPT`)."""
    memory_history: bool = False
    """Each captured rank records torch's allocator history into the run's `memory_history/` (`maya memory`)."""
    warehouse: str | Path | None = None
    """Where the device-time oracle's estimator version is looked up (None: the default warehouse)."""

    def __post_init__(self) -> None:
        for name in ("nnodes", "nproc_per_node"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, not {getattr(self, name)!r}")
        if self.iterations is not None and self.iterations < 0:
            raise ValueError(f"iterations must be >= 0 (None or 0: run to the end), not {self.iterations}")
        if self.device_time not in DEVICE_TIME_CHOICES:
            raise ValueError(f"unknown device_time {self.device_time!r}; choose from {', '.join(DEVICE_TIME_CHOICES)}")
        if self.ranks is not None:
            ranks = tuple(sorted(set(self.ranks)))
            outside = [r for r in ranks if not 0 <= r < self.world_size]
            if outside:
                raise ValueError(f"rank(s) {outside} outside the world of {self.world_size}")
            object.__setattr__(self, "ranks", ranks)
        pairs = self.env.items() if isinstance(self.env, Mapping) else self.env
        env = tuple(sorted((k, v) for k, v in pairs))
        bad = [k for k, v in env if not (isinstance(k, str) and k and "=" not in k and isinstance(v, str))]
        if bad:
            raise ValueError(f"env: names must be non-empty strings without '=' and values strings: {bad}")
        object.__setattr__(self, "env", env)
        if self.launch_command is not None:
            object.__setattr__(self, "launch_command", tuple(self.launch_command))

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


@dataclass(frozen=True)
class PredictOptions:
    """How to predict a run (what `maya predict` takes): the GPU, data-parallel degree and cluster to re-target
    to (None: the trace's), where durations come from (`DURATION_CHOICES` or a `DurationProvider`), the
    estimator version and the warehouse it is looked up in, cost inputs, the 10-90% `band` (two more
    replays), kernels slowed by concurrent collectives (`contention`), tensor-core kernels at the clock their mix
    sustains under the board's power cap where it binds (`sustained_clock`: `maya.simulator.sustained_clock`)
    and a Perfetto `timeline` to write."""

    hardware: str | None = None
    dp: int | None = None
    cluster: str | None = None
    durations: str | DurationProvider = "auto"
    estimator_version: str = "latest"
    price_per_gpu_hour: float | None = None
    tokens_per_iteration: float | None = None
    band: bool = False
    contention: bool = True
    sustained_clock: bool = True
    timeline: str | Path | None = None
    warehouse: str | Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.durations, str) and self.durations not in DURATION_CHOICES:
            raise ValueError(f"unknown durations {self.durations!r}; choose from {', '.join(DURATION_CHOICES)}")
        if self.dp is not None and self.dp < 1:
            raise ValueError(f"dp must be >= 1, not {self.dp}")
        for name in ("price_per_gpu_hour", "tokens_per_iteration"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, not {value}")


@dataclass(frozen=True)
class Capture:
    """The outcome of `capture`: the run directory and its status ('complete', 'oom', 'failed', 'interrupted'), why it did not
    complete (`reason`), the largest peak of device memory of a rank, whether a cached run was reused, and the
    emulation's per-rank results (None when reused)."""

    run_dir: Path
    status: str
    reason: str | None = None
    peak_bytes: int | None = None
    reused: bool = False
    result: EmulationResult | None = None
    key: str | None = None
    """The capture cache's key (None: not cached)."""

    @property
    def ok(self) -> bool:
        return self.status == "complete"

    @property
    def ranks(self) -> list[RankCapture]:
        return self.result.ranks if self.result is not None else []

    def out_of_memory(self) -> list[OutOfMemory]:
        """The out-of-memory failure of every rank that stopped on one (`simulator.oom`: one meaning of
        "in use", the bytes allocated when the allocation failed)."""
        from maya.simulator.oom import recorded_ooms
        from maya.simulator.trace import load

        return recorded_ooms(load(self.run_dir)) if self.status == "oom" else []


@dataclass(frozen=True)
class DeviceTime:
    """The device-time oracle of an emulation: the `MAYA_EMU_DEVICE_TIME` value (None: host time) and what
    it is, in words."""

    spec: str | None
    described: str


def device_time(options: EmulateOptions) -> DeviceTime:
    """The oracle `options` ask for; ValueError names an estimator version that is not registered."""
    from maya.core import hardware as catalog
    from maya.emulator.device_time import FACTORY, resolve, spec

    oracle_options, described = resolve(options.device_time, options.estimator_version, options.warehouse)
    if oracle_options is None:
        return DeviceTime(None, described)
    return DeviceTime(spec(FACTORY, hardware=catalog.get(options.hardware).name, **oracle_options), described)


def command_key(argv: Sequence[str], options: EmulateOptions) -> str:
    """The capture cache's key of a command: the script's content (when `argv[0]` is a file), the arguments,
    the options and the emulator's source."""
    from maya.emulator.capture_cache import emulator_digest

    script = Path(argv[0]) if argv else None
    content = hashlib.sha256(script.read_bytes()).hexdigest() if script and script.is_file() else None
    blob = json.dumps([content, list(argv), asdict(options), emulator_digest()], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def capture(
    argv: Sequence[str],
    options: EmulateOptions = EmulateOptions(),
    *,
    out_dir: str | Path | None = None,
    cache: CaptureCache | None = None,
    key: str | None = None,
    oracle: DeviceTime | None = None,
    on_rank_done: Callable[[RankCapture], None] | None = None,
    on_output: Callable[[str], None] | None = None,
) -> Capture:
    """Emulate `argv` (`script.py args` or `-m module args`) on virtual GPUs. Into `out_dir` (default a new
    folder under `$MAYA_HOME/runs`), or through `cache`: the complete run of `key` (default `command_key`)
    reused, else captured atomically. Raises `BuildError`, `FileExistsError` (`out_dir` not empty) and
    ValueError (bad options; `transformer_engine.Unavailable`: the script imports Transformer Engine, which could not be
    installed), OSError (installing it); a script that fails or runs out of memory is the capture's status (one that
    fails importing Transformer Engine says how to install it); a stop signal raises
    `CaptureInterrupted` once what the ranks captured is written. `oracle`:
    the device-time oracle if already resolved (`device_time(options)`)."""
    from maya.core.paths import runs_dir
    from maya.emulator.capture_cache import failure_summary
    from maya.emulator.launcher import Interrupted, Topology, emulate
    from maya.installer import flash_attn, grouped_gemm, megablocks, transformer_engine

    if cache is not None and out_dir is not None:
        raise ValueError("give out_dir or cache, not both")
    if not argv:
        raise ValueError("no script to capture: argv is empty")
    spec = (oracle or device_time(options)).spec

    def run(target: Path) -> EmulationResult:
        if transformer_engine.imports_te(argv):  # installed on first need (MAYA_TE_AUTO), not by a cached capture
            transformer_engine.ensure(f"{Path(argv[0]).name}, which imports transformer_engine,")
        return emulate(
            list(argv),
            target,
            hardware=options.hardware,
            topology=Topology(options.nnodes, options.nproc_per_node),
            ranks=options.ranks,
            dedup=options.dedup,
            iterations=options.iterations or None,
            device_time=spec,
            env=dict(options.env),
            rank_argument=options.rank_argument,
            node_rank_variables=options.node_rank_variables,
            launch_command=options.launch_command,
            memory_history=options.memory_history,
            on_rank_done=on_rank_done,
            on_output=on_output,
        )

    cached_key = None if cache is None else key or command_key(argv, options)
    try:
        if cache is None:
            result = run(Path(out_dir) if out_dir is not None else runs_dir() / time.strftime("emulate-%Y%m%d-%H%M%S"))
        else:
            cached = cache.capture(cached_key, run)
            if cached.result is None:
                return Capture(cached.run_dir, "complete", reused=True, key=cached_key)
            result = cached.result
    except Interrupted as e:
        raise CaptureInterrupted(
            _outcome(e.result, cached_key, f"interrupted by {e.result.interrupted_by}"), e.exit_code
        ) from None
    if result.status == "complete":
        return _outcome(result, cached_key, None)
    reason = failure_summary(result)
    hints = (transformer_engine, flash_attn, grouped_gemm, megablocks)  # TE: one the scan missed
    hint = next((h for h in (m.missing_hint(reason) for m in hints) if h), None)
    return _outcome(result, cached_key, f"{reason}; {hint}" if hint else reason)


def _outcome(result: EmulationResult, key: str | None, reason: str | None) -> Capture:
    peak = max((r.peak_bytes for r in result.ranks), default=None)
    return Capture(result.run_dir, result.status, reason, peak, False, result, key)


class CaptureInterrupted(KeyboardInterrupt):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) ended `capture`: every rank was stopped and what they captured
    was kept, marked interrupted (`capture`, status 'interrupted'); `exit_code` is 128 + the signal's number.
    A KeyboardInterrupt, so a loop of captures (a search) stops as on Ctrl-C."""

    def __init__(self, capture: Capture, exit_code: int):
        super().__init__(capture.reason)
        self.capture = capture
        self.exit_code = exit_code


def host_factor(hardware: str = DEFAULT_HARDWARE, cluster: str | None = None) -> tuple[float, str]:
    """The host factor a prediction on `hardware` and `cluster` scales emulated framework time by, and where it
    comes from: `$MAYA_HOST_FACTOR`, else the cluster's `host_factor`, else 0 (`docs/host-time.md`). ValueError
    for a switch that is not a factor or an unknown cluster."""
    from maya.core import hardware as catalog
    from maya.simulator.simulation import host_factor as resolve

    return resolve(cluster, catalog.get(hardware))


PREDICTOR_SOURCES = ("api", "simulator", "estimators", "core")
"""Maya's packages whose source turns a trace into a prediction (`predictor_digest`; `core` holds the hardware and
cluster catalogs and the synthetic corpus' document lengths), beside the trace format's own (`maya_trace_spec`: its
vocabulary classifies kernels and sizes dtypes)."""
PREDICTOR_DATA = ("hardware", "clusters", "collectives", "band", "kernels_public")
"""The folders of shipped data the predictor reads at run time (the attention model is fitted on
`kernels_public` when loaded): their files, documentation aside, are part of `predictor_digest`."""


@lru_cache(maxsize=1)
def predictor_digest() -> str:
    """Of what turns a trace and an estimator version into a prediction besides the options: Maya's version, the
    source of `PREDICTOR_SOURCES` and of `maya_trace_spec`, and the shipped data of `PREDICTOR_DATA`. Equal digests
    predict alike."""
    import maya
    import maya_trace_spec
    from maya.core.digest import files_digest
    from maya.core.paths import data_dir

    root, data = Path(maya.__file__).parent, data_dir()
    spec = Path(maya_trace_spec.__file__).parent
    files = [(p, root) for package in PREDICTOR_SOURCES for p in sorted((root / package).rglob("*.py"))]
    files += [(p, spec.parent) for p in sorted(spec.rglob("*.py"))]
    files += [(p, data) for folder in PREDICTOR_DATA for p in sorted((data / folder).rglob("*")) if p.suffix != ".md"]
    return files_digest(maya.__version__, files)


def predict(run_dir: str | Path, options: PredictOptions = PredictOptions()) -> Prediction:
    """Predict a run's iteration time, breakdown, MFU, memory and cost. Stores nothing (`record` does); writes
    only `options.timeline`, when given."""
    return replay(run_dir, options).prediction


def replay(run_dir: str | Path, options: PredictOptions = PredictOptions()) -> Replay:
    """`predict`, keeping what the prediction was made from (`Replay`): the `Simulation`, with every call's
    simulated times, and the band's low and high replays, for a driver that reads more than the prediction (the
    NeuSight suite times its CUDA-event windows). Stores nothing, as `predict`."""
    from maya.simulator.predict import replay as replay_run

    return replay_run(
        run_dir,
        hardware=options.hardware,
        durations=options.durations,
        price_per_gpu_hour=options.price_per_gpu_hour,
        tokens_per_iteration=options.tokens_per_iteration,
        timeline=options.timeline,
        model_version=options.estimator_version,
        cluster=options.cluster,
        dp=options.dp,
        warehouse=options.warehouse,
        band=options.band,
        contention=options.contention,
        sustained_clock=options.sustained_clock,
    )


def record(prediction: Prediction, *, warehouse: str | Path | None = None) -> str:
    """Store `prediction` in the warehouse (table `predictions`, one transaction); returns its id."""
    from maya.simulator.store import store_prediction

    return store_prediction(prediction, warehouse)
