"""Maya's environment switches: every variable Maya reads, each named once here with its default and effect.

Callers read a switch through this module (`settings.home()`, `settings.SQL_TIMEOUT.get()`), at the moment
they need it, so a test or a long-lived process that changes the environment is seen. ARCHITECTURE.md's
"Environment switches" section is generated from `SWITCHES` (`markdown()`), and a test checks that every
variable read anywhere (Python, the native stubs, scripts) is one of them. Pure standard library: emulated
ranks import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Switch:
    """One environment variable: its name, its default and its effect in words, and who sets it."""

    name: str
    default: str
    """The default, as the documentation shows it (`unset` when the variable has none)."""
    effect: str
    rank: bool = False
    """Set by the launcher for each emulated rank (not for users)."""

    def get(self) -> str | None:
        """The variable's value now; None when it is unset or empty."""
        return os.environ.get(self.name) or None


HOME = Switch(
    "MAYA_HOME",
    "`~/.maya`",
    "where the warehouse, captured runs, estimator artifacts, the emulator's build cache and the attention models "
    "fitted per estimator artifact (`cache/attention_model/`) live",
)
WAREHOUSE = Switch("MAYA_WAREHOUSE", "`$MAYA_HOME/warehouse.duckdb`", "the warehouse file")
EMULATOR_CACHE = Switch(
    "MAYA_EMULATOR_CACHE",
    "`$MAYA_HOME/emulator`",
    "where the emulator's stub libraries are built (keyed by their sources and the installed CUDA headers)",
)
KEEP_CAPTURE = Switch(
    "MAYA_KEEP_CAPTURE",
    "unset",
    "keep each rank's raw capture (`<run>/.capture/`) after a successful emulation (it is always kept after a failure)",
)
EMU_FORKSERVER = Switch(
    "MAYA_EMU_FORKSERVER",
    "`1`",
    "`0`: start every emulated rank as a new interpreter instead of forking it from the zygote",
)
EMU_LOOP_LIMIT = Switch(
    "MAYA_EMU_LOOP_LIMIT",
    "`10000`",
    "host reads of device values repeated this often without training progress stop the rank with a message "
    "naming the loop's op (`0`: never; read by `native/host_read.c`)",
)
EMU_VALUES_DEBUG = Switch(
    "MAYA_EMU_VALUES_DEBUG",
    "unset",
    "`1`: an emulated rank says on stderr, for each op that issued kernels and each collective, whether its values "
    "were computed on the host, given a routing stand-in or left unknown (`native/host_values.cpp`)",
)
EMU_MAILBOX_TIMEOUT = Switch(
    "MAYA_EMU_MAILBOX_TIMEOUT",
    "`600`",
    "seconds an emulated rank waits for a peer's pickled object (`send_object_list`, `broadcast_object_list`, "
    "...) or a small broadcast's bytes before failing",
)
SQL_TIMEOUT = Switch(
    "MAYA_SQL_TIMEOUT",
    "`300`",
    "seconds a `maya sql` query may run before it is stopped (its process killed if DuckDB does not stop; `0`: "
    "no limit)",
)
SQL_MEMORY = Switch(
    "MAYA_SQL_MEMORY",
    "half the physical memory",
    "memory a `maya sql` query may use (`8GB`, `512MiB`, bytes): DuckDB's buffers and the query process's data segment",
)
PROFILES_DIR = Switch(
    "MAYA_PROFILES_DIR",
    "`profiles/` in the shipped data (`src/maya/data/`)",
    "where the pipelines look for measured profiles dropped by `maya profile`",
)
INSTALL = Switch("MAYA_INSTALL", "`wheel`", "`scripts/setup`: `editable` installs Maya in development mode")
WITH_TE = Switch(
    "MAYA_WITH_TE",
    "`0`",
    "`scripts/setup`: `1` installs Transformer Engine now (the `te` extra, and its PyTorch extension built once into "
    "`$MAYA_HOME/wheels/`) rather than on first need (`MAYA_TE_AUTO`), whatever that says, and retries a failed build",
)
TE_AUTO = Switch(
    "MAYA_TE_AUTO",
    "`build`",
    "what needs Transformer Engine when it is not installed, or not the pinned release for this torch (an `amp_fp8` "
    "MPT row when planned; a capture of a script that imports it: `maya emulate`, a validation row, `maya search` "
    "before its first point) installs it into Maya's own environment (the `.venv` `scripts/setup` made; elsewhere it "
    "names the command): `build` from the wheel cached in `$MAYA_HOME/wheels/`, building that once if there is none "
    "(about 10 minutes on 2 idle cores; a failure is remembered there and not repeated); `cached` only from a cached "
    "wheel; `off` never (it fails, naming `MAYA_WITH_TE=1 scripts/setup`)",
)
MAX_JOBS = Switch(
    "MAX_JOBS",
    "`2`",
    "how many files Transformer Engine's extension build compiles at once (`MAYA_WITH_TE=1 scripts/setup`, "
    "`MAYA_TE_AUTO=build`)",
)
ARROW_MEMORY_POOL = Switch(
    "ARROW_DEFAULT_MEMORY_POOL",
    "unset",
    "Arrow's own: the allocator of Arrow's buffers (`system`, `jemalloc`, `mimalloc`); unset, `maya predict` reads "
    "traces into the C library's allocator (`system`) for the command's duration",
)
CC = Switch("CC", "`gcc`", "the C compiler that builds the emulator's stubs")
CXX = Switch("CXX", "`g++`", "the C++ compiler that builds the emulator's op observer")
LLM_FOUNDRY_REPO = Switch(
    "MAYA_LLM_FOUNDRY_REPO",
    "unset",
    "tests only: a checkout of llm-foundry's repository, for its end-to-end test (skipped without)",
)
MEGATRON_LM = Switch(
    "MAYA_MEGATRON_LM",
    "`$MAYA_HOME/megatron-lm/<branch>`",
    "a checkout of NVIDIA/Megatron-LM whose `pretrain_gpt.py` Megatron validation suites run (`maya validate "
    "korthikanti2022`; without it, the branch matching the installed megatron-core is cloned there once) and its "
    "end-to-end test runs (skipped without)",
)
MODDED_NANOGPT_REPO = Switch(
    "MAYA_MODDED_NANOGPT_REPO",
    "unset",
    "tests and `benchmarks/frameworks.py` only: a checkout of KellerJordan/modded-nanogpt, for the speed-run "
    "script's end-to-end test and matrix row (skipped without)",
)
NANOGPT_REPO = Switch(
    "MAYA_NANOGPT_REPO",
    "unset",
    "tests and `benchmarks/frameworks.py` only: a checkout of karpathy/nanoGPT, for its DDP end-to-end test and "
    "matrix rows (skipped without)",
)
PICOTRON_REPO = Switch(
    "MAYA_PICOTRON_REPO",
    "unset",
    "tests only: a checkout of huggingface/picotron, for its end-to-end test (skipped without; it also needs "
    "transformers<5 on `PYTHONPATH`)",
)
HOST_FACTOR = Switch(
    "MAYA_HOST_FACTOR",
    "the cluster's `host_factor`, else `0`",
    "`maya predict`: the framework host time (Python, dispatch, hooks) read between calls on the emulating CPU is "
    "multiplied by this for the target host and added to it; `0` reports it without adding it, `1` assumes the "
    "target host runs it as fast",
)
EMU_CONFIG = Switch("MAYA_EMU_CONFIG", "", "the virtual devices (read by `native/config.c`)", rank=True)
EMU_OUT = Switch("MAYA_EMU_OUT", "", "the rank's capture folder", rank=True)
EMU_LIBS = Switch("MAYA_EMU_LIBS", "", "the built stubs", rank=True)
EMU_MAILBOX = Switch(
    "MAYA_EMU_MAILBOX", "", "object collectives and small tensor broadcasts between isolated ranks", rank=True
)
EMU_ITERATIONS = Switch("MAYA_EMU_ITERATIONS", "", "the `--iterations` bound", rank=True)
EMU_LAUNCH = Switch(
    "MAYA_EMU_LAUNCH",
    "",
    "the launcher's command the rank's job was read from (`maya emulate -- torchrun ...`): a `torch.multiprocessing` "
    "spawn in the rank is refused, naming it; unset (`-- python SCRIPT`): the rank runs the worker of its local rank",
    rank=True,
)
EMU_APPEND_PATH = Switch(
    "MAYA_EMU_APPEND_PATH",
    "",
    "a folder the rank appends to `sys.path` before it runs the script: `tune run`'s working directory (torchtune's "
    "CLI appends it), after site-packages, so a module there does not shadow an installed one",
    rank=True,
)
EMU_RANK_PID = Switch(
    "MAYA_EMU_RANK_PID",
    "",
    "the rank's pid (set by the rank itself): a process whose pid differs is one it started, whose device calls "
    "the stubs count rather than record (`native/children.c`), and to which `nvidia-smi` and NVML report the rank's memory",
    rank=True,
)
EMU_DEVICE_TIME = Switch(
    "MAYA_EMU_DEVICE_TIME",
    "",
    "the device-time oracle that answers CUDA-event timings: a JSON object naming its factory, `module:callable`, "
    "and options; `maya emulate --device-time` sets it, the emulator only loads it",
    rank=True,
)
EMU_MEMORY_HISTORY = Switch(
    "MAYA_EMU_MEMORY_HISTORY",
    "",
    "the folder where the rank writes torch's allocator history as a snapshot (`maya emulate --memory-history`; "
    "`memory_history.py`); unset: none is recorded",
    rank=True,
)

SWITCHES: tuple[Switch, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Switch))
"""Every switch, in the order defined here."""


def home() -> Path:
    """`$MAYA_HOME`, default `~/.maya`: the warehouse and captured runs live here."""
    return Path(HOME.get() or Path.home() / ".maya").expanduser()


def warehouse() -> Path:
    """`$MAYA_WAREHOUSE`, default `$MAYA_HOME/warehouse.duckdb`."""
    raw = WAREHOUSE.get()
    return Path(raw).expanduser() if raw else home() / "warehouse.duckdb"


def emulator_cache() -> Path:
    """`$MAYA_EMULATOR_CACHE`, default `$MAYA_HOME/emulator`."""
    raw = EMULATOR_CACHE.get()
    return Path(raw).expanduser() if raw else home() / "emulator"


def keep_capture() -> bool:
    """Whether a successful emulation keeps each rank's raw capture (`$MAYA_KEEP_CAPTURE` set)."""
    return KEEP_CAPTURE.get() is not None


def forkserver() -> bool:
    """Whether emulated ranks fork from a zygote (`$MAYA_EMU_FORKSERVER` is not `0`)."""
    return EMU_FORKSERVER.get() != "0"


def mailbox_timeout_s() -> float:
    """`$MAYA_EMU_MAILBOX_TIMEOUT` in seconds, default 600."""
    raw = EMU_MAILBOX_TIMEOUT.get()
    try:
        return float(raw) if raw else 600.0
    except ValueError:
        raise ValueError(f"{EMU_MAILBOX_TIMEOUT.name}={raw!r} is not a number of seconds") from None


def host_factor() -> float | None:
    """`$MAYA_HOST_FACTOR` as a number (None when unset); ValueError when it is not a number at or above 0."""
    raw = HOST_FACTOR.get()
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"{HOST_FACTOR.name}={raw!r} is not a factor at or above 0 (0 leaves framework time out)")
    return value


def markdown() -> str:
    """ARCHITECTURE.md's environment-switch section body: a table of the switches users set, then those the
    launcher sets for each emulated rank."""
    rows = [f"| `{s.name}` | {s.default} | {s.effect} |" for s in SWITCHES if not s.rank]
    ranks = [f"| `{s.name}` | {s.effect} |" for s in SWITCHES if s.rank]
    return "\n".join(
        [
            "| variable | default | effect |",
            "|---|---|---|",
            *rows,
            "",
            "Set by the launcher for each emulated rank (not for users):",
            "",
            "| variable | what it holds |",
            "|---|---|",
            *ranks,
        ]
    )
