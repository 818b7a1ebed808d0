"""A suite of workload configs measured one after another within a time budget, each in a fresh
process (an out-of-memory error, a CUDA error or a hang then touches only its own config, and each
config starts with an empty allocator). Run again on the same directory, it skips every config that
has a results row, so a suite spreads over several short device sessions.

A suite file is a Python file defining `CONFIGS` or a JSON file holding that list (no YAML: GPU
hosts may lack a parser). Each entry::

    {"name": "gpt-125m-s1024-b8-bf16", "script": "gpt.py", "args": ["--size", "125m", "--bf16"],
     "iterations_by": None, "estimate_s": 14.0, ...}

`script` is relative to the suite file; `iterations_by` (optional) names what ends an iteration in
a script without an optimizer; `estimate_s` (optional) is the expected time of the whole config,
process start included, which the budget check uses. Every key besides name, script and args is
recorded in the results' config JSON.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..session import SessionResult
from .measure import MeasureSettings, measure_workload
from .results import STATUSES, check_name, config_columns, done_names, is_done, read_result, summary, write_result

Clock = Callable[[], float]
LOG_TAIL_CHARS = 4000


@dataclass(frozen=True)
class SuiteConfig:
    name: str
    suite: str
    """The suite file's path, as given."""
    script: Path
    """Relative to the working directory when the suite file's path is."""
    args: tuple[str, ...]
    iterations_by: str | None = None
    attrs: dict = field(default_factory=dict)
    """The entry's other keys (estimate_s, ...), recorded with the results."""

    @property
    def argv(self) -> list[str]:
        return [str(self.script), *self.args]

    @property
    def estimate_s(self) -> float | None:
        return self.attrs.get("estimate_s")

    @property
    def recorded_attrs(self) -> dict:
        return {**self.attrs, "suite": self.suite}

    def measure_settings(self, base: MeasureSettings) -> MeasureSettings:
        return MeasureSettings(base.warmup, base.iterations, self.iterations_by or base.iterations_by)


def load_suite(path: str | Path) -> list[SuiteConfig]:
    """The configs of a suite file (`.py` defining CONFIGS, or `.json`), in its order."""
    path = Path(path)
    if path.suffix == ".json":
        entries = json.loads(path.read_text())
    else:
        entries = runpy.run_path(str(path)).get("CONFIGS")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: a suite is a list of configs (CONFIGS in a .py file, or a .json list)")
    configs, seen = [], set()
    for entry in entries:
        name = check_name(entry["name"])
        if name in seen:
            raise ValueError(f"{path}: config {name} appears twice")
        seen.add(name)
        script = path.parent / entry["script"]
        if not script.is_file():
            raise ValueError(f"{path}: config {name}: no script {script}")
        attrs = {k: v for k, v in entry.items() if k not in ("name", "script", "args", "iterations_by")}
        configs.append(
            SuiteConfig(
                name, str(path), script, tuple(str(a) for a in entry.get("args", ())), entry.get("iterations_by"), attrs
            )
        )
    return configs


def find_config(path: str | Path, name: str) -> SuiteConfig:
    for config in load_suite(path):
        if config.name == name:
            return config
    raise ValueError(f"{path}: no config named {name}")


def measure_suite_config(
    root: str | Path,
    suite_file: str | Path,
    name: str,
    measure: MeasureSettings = MeasureSettings(),
    *,
    hardware: str | None = None,
) -> dict:
    """Measure one config of the suite in this process (what each config's fresh process does)."""
    config = find_config(suite_file, name)
    return measure_workload(
        config.argv, root, name, config.measure_settings(measure), hardware=hardware, attrs=config.recorded_attrs
    )


@dataclass(frozen=True)
class SuiteSettings:
    budget_s: float = 8 * 60
    config_timeout_s: float = 180.0
    """A config still running after this long is killed and recorded as `timeout`."""
    default_estimate_s: float = 30.0
    """Expected time of a config without an `estimate_s`."""
    margin_s: float = 5.0
    """Kept free at the end of the budget (writing the last row, exiting)."""
    measure: MeasureSettings = field(default_factory=MeasureSettings)


@dataclass(frozen=True)
class ChildRun:
    returncode: int | None
    """None: killed at its time limit."""
    log_tail: str


RunConfig = Callable[[SuiteConfig, float], ChildRun]
"""Runs one config within a time limit in seconds; the config's results row is its outcome."""


def profiler_command() -> list[str]:
    """How to start the profiler's command line in a new process: through run_on_device.py, which
    imports this very copy of Maya (a source checkout with nothing installed, or the installed one)."""
    return [sys.executable, str(Path(__file__).parents[1] / "run_on_device.py")]


class ProcessRunner:
    """Runs each config as `workload --suite FILE --config NAME` in a fresh process, its output in
    DIR/logs/<name>.log."""

    def __init__(self, root: Path, suite_file: Path, settings: SuiteSettings, hardware: str | None):
        self.root, self.suite_file, self.settings, self.hardware = root, suite_file, settings, hardware

    def command(self, config: SuiteConfig) -> list[str]:
        m = self.settings.measure
        cmd = [
            *profiler_command(),
            "workload",
            "--out",
            str(self.root),
            "--suite",
            str(self.suite_file),
            "--config",
            config.name,
            "--warmup",
            str(m.warmup),
            "--iterations",
            str(m.iterations),
        ]
        if m.iterations_by:
            cmd += ["--iterations-by", m.iterations_by]
        return cmd + (["--hardware", self.hardware] if self.hardware else [])

    def __call__(self, config: SuiteConfig, timeout_s: float) -> ChildRun:
        log = self.root / "logs" / f"{config.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            try:
                cmd = self.command(config)
                # an installed module must not be shadowed by a source tree in the working directory
                safe = {"PYTHONSAFEPATH": "1"} if "-m" in cmd else {}
                returncode = subprocess.run(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout_s,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **safe},
                ).returncode
            except subprocess.TimeoutExpired:
                returncode = None
        return ChildRun(returncode, log.read_text(errors="replace")[-LOG_TAIL_CHARS:])


def _failure_row(
    config: SuiteConfig,
    settings: MeasureSettings,
    child: ChildRun,
    hardware: str | None,
    limit_s: float,
    elapsed_s: float,
) -> dict:
    """The row of a config whose process ended without writing one: killed at its limit, or crashed."""
    killed = child.returncode is None
    reason = (
        f"killed after {limit_s:.0f} s"
        if killed
        else f"the process exited with code {child.returncode} without a results row"
    )
    error = f"end of the config's log:\n{child.log_tail.rstrip()}\n{reason}"
    recorded = {**config.measure_settings(settings).as_config(), **config.recorded_attrs}
    return {
        **config_columns(config.name, config.argv, recorded),
        "status": "timeout" if killed else "error",
        "error": error,
        "hardware": hardware,
        "oom": False,
        "started_at_ns": time.time_ns() - round(elapsed_s * 1e9),
        "wall_s": elapsed_s,
    }


def run_suite(
    root: str | Path,
    suite_file: str | Path,
    settings: SuiteSettings = SuiteSettings(),
    *,
    hardware: str | None = None,
    run_config: RunConfig | None = None,
    clock: Clock = time.monotonic,
    log: Callable[[str], None] = print,
) -> SessionResult:
    """Measure the suite's configs that have no results row under `root`, in the suite's order, until
    done or until the next one's estimate no longer fits in the budget. A config killed because the
    budget ran out leaves no row and is measured again next time; one killed at `config_timeout_s`
    is recorded as `timeout`."""
    root, suite_file = Path(root), Path(suite_file)
    started = clock()
    configs = load_suite(suite_file)
    pending = [c for c in configs if not is_done(root, c.name)]
    log(
        f"{len(configs)} configs in the suite, {len(configs) - len(pending)} already done, "
        f"budget {settings.budget_s:.0f} s"
    )
    run_config = run_config or ProcessRunner(root, suite_file, settings, hardware)
    measured: Counter = Counter()
    stop = "complete"
    for config in pending:
        left = started + settings.budget_s - settings.margin_s - clock()
        if (config.estimate_s or settings.default_estimate_s) > left:
            stop = "budget"
            break
        limit = min(settings.config_timeout_s, left)
        t0 = clock()
        child = run_config(config, limit)
        if not is_done(root, config.name):
            if child.returncode is None and limit < settings.config_timeout_s:
                stop = "budget"
                log(f"{config.name}: stopped at the end of the budget; it is measured again next time")
                break
            write_result(root, _failure_row(config, settings.measure, child, hardware, limit, clock() - t0))
        row = read_result(root, config.name)
        measured[row["status"]] += 1
        log(f"[{clock() - started:7.1f} s] {summary(row)}")
    names = {c.name for c in configs}
    counts = ", ".join(f"{measured[s]} {s}" for s in STATUSES if measured[s]) or "none"
    done = len(done_names(root) & names)
    return SessionResult(stop, measured, done, len(configs), clock() - started, "suite", (f"this session: {counts}",))
