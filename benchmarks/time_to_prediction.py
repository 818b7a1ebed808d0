"""Time to a prediction: `maya predict` on the demo's run, end to end and phase by phase (issue 30).

Target: `maya predict` on the demo's run (1,380 calls) within 3 s of wall time, on 2 cores.

- end to end: `maya predict RUN --json` in a fresh interpreter, best of `--repeat`, with the bytecode of every
  module cached (as after a first run) and without any (`cold`: each module compiled from source, as in an
  environment with PYTHONDONTWRITEBYTECODE=1 and nothing precompiled);
- phases: the same command in one fresh interpreter with each phase of the predict path timed exclusively
  (a phase's time excludes the phases it calls): CLI import, trace loading, call-frame building, estimator
  loading (registry, artifact, XGBoost), inference, event-loop replays, band, warehouse write; `other` is
  the rest (summaries, notes, iteration detection);
- ratios: predict wall / simulated calls, and `maya --help` wall.

Predictions are recorded in a scratch copy of the warehouse (and its estimator artifacts), never in yours.
Without RUN, the newest demo run under $MAYA_HOME/runs is used, made with `maya demo` when there is none.
Usage: python benchmarks/time_to_prediction.py [RUN] [--repeat K]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

TARGET_S = 3.0
MAYA = [sys.executable, "-m", "maya"]
PHASES = (
    "CLI import",
    "trace loading",
    "call-frame building",
    "estimator loading",
    "inference",
    "replays",
    "band",
    "warehouse write",
    "other",
)


class Phases:
    """Exclusive wall and CPU seconds per phase of wrapped functions."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._children: list[list[float]] = []

    def wrap(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t, c = time.perf_counter(), time.process_time()
            self._children.append([0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                child_wall, child_cpu = self._children.pop()
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                self.wall[name] += wall - child_wall
                self.cpu[name] += cpu - child_cpu
                if self._children:
                    self._children[-1][0] += wall
                    self._children[-1][1] += cpu

        return timed


def phases_child(run: str) -> None:
    """Run `maya predict RUN --json` in this process with its phases timed; print them as JSON."""
    t0, c0 = time.perf_counter(), time.process_time()
    import maya.cli

    phases = Phases()
    phases.wall["CLI import"], phases.cpu["CLI import"] = time.perf_counter() - t0, time.process_time() - c0
    for module, attr, name in (
        ("maya.simulator.predict", "load", "trace loading"),
        ("maya.simulator.predict", "add_band", "band"),
        ("maya.simulator.simulation", "compile_rank", "call-frame building"),
        ("maya.simulator.pricing", "priced_frame", "call-frame building"),
        ("maya.simulator.simulation", "make_provider", "estimator loading"),
        ("maya.simulator.simulation", "price", "inference"),
        ("maya.simulator.engine", "Engine.run", "replays"),
        ("maya.api", "record", "warehouse write"),
    ):
        owner = import_module(module)
        *path, attr = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, attr, phases.wrap(name, getattr(owner, attr)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        maya.cli.app(["predict", run, "--json"], standalone_mode=False)
    total_wall, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    phases.wall["other"] = total_wall - sum(phases.wall.values())
    phases.cpu["other"] = total_cpu - sum(phases.cpu.values())
    prediction = json.loads(out.getvalue())
    print(json.dumps({"wall": phases.wall, "cpu": phases.cpu, "calls": prediction["simulated_calls"]}))


def demo_run() -> Path:
    """The newest demo run under $MAYA_HOME/runs, made with `maya demo` when there is none."""
    from maya.core.paths import runs_dir

    runs = sorted(p for p in runs_dir().glob("demo-*") if (p / "run.parquet").is_file())
    if runs:
        return runs[-1]
    print("no demo run yet: running `maya demo` (a few minutes the first time)", file=sys.stderr)
    subprocess.run([*MAYA, "demo"], check=True, stdout=subprocess.DEVNULL)
    return demo_run()


def scratch_warehouse(into: Path) -> Path:
    """A copy of the warehouse and its estimator artifacts under `into`."""
    from maya.core.paths import warehouse_path

    source = warehouse_path()
    shutil.copy2(source, into / source.name)
    if (source.parent / "estimators").is_dir():
        shutil.copytree(source.parent / "estimators", into / "estimators")
    return into / source.name


def timed_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of a command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", nargs="?", type=Path, help="run directory (default: the newest demo run)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--phases-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phases_child:
        phases_child(args.phases_child)
        return
    run = str((args.run or demo_run()).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = scratch_warehouse(Path(tmp))
        warm = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        warm["MAYA_WAREHOUSE"] = str(warehouse)
        cold = {**warm, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "no-bytecode")}
        predict = [*MAYA, "predict", run, "--json"]
        timed_run(predict, warm)  # writes the bytecode caches
        runs = [timed_run(predict, warm) for _ in range(args.repeat)]
        cold_wall, cold_cpu = timed_run(predict, cold)
        help_wall, help_cpu = min(timed_run([*MAYA, "--help"], warm) for _ in range(args.repeat))
        child = subprocess.run(
            [sys.executable, __file__, "--phases-child", run], env=warm, check=True, capture_output=True, text=True
        )
    phases = json.loads(child.stdout.splitlines()[-1])
    print(f"maya predict {run}  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"{'phase':<22}{'wall s':>9}{'cpu s':>9}")
    for name in PHASES:
        print(f"{name:<22}{phases['wall'].get(name, 0.0):9.3f}{phases['cpu'].get(name, 0.0):9.3f}")
    print(f"{'total (in process)':<22}{sum(phases['wall'].values()):9.3f}{sum(phases['cpu'].values()):9.3f}")
    best, best_cpu = min(runs)
    calls = phases["calls"]
    print(
        f"maya predict: best {best:.2f} s wall ({best_cpu:.2f} s CPU) of {args.repeat}, target {TARGET_S:g} s wall: "
        f"{'met' if best <= TARGET_S else 'NOT met'}; cold (no bytecode cached) {cold_wall:.2f} s wall "
        f"({cold_cpu:.2f} s CPU)"
    )
    print(f"simulated calls {calls:,}: predict wall / simulated calls {best / calls * 1e6:,.0f} us per call")
    print(f"maya --help: {help_wall:.2f} s wall ({help_cpu:.2f} s CPU)")


if __name__ == "__main__":
    main()
