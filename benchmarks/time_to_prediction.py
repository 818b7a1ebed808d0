"""Time to a prediction: `maya predict` end to end and phase by phase, in one table of phases and ratios (issue 30).

Targets: `maya predict` on the demo's run (1,380 calls) within 3 s of wall time, on 2 cores; on a trace of 8
million simulated calls within 15 s (`--large RUN`); the whole `maya emulate` of 3 steps of a 1.3B GPT within
5 s and its steady emulated step at most 0.10 of the H100 step `maya predict` gives for it (`--emulate`).

- end to end: `maya predict RUN --json` in a fresh interpreter, best of `--repeat`, with the bytecode of every
  module cached (as after a first run) and without any (`cold`: each module compiled from source, as in an
  environment with PYTHONDONTWRITEBYTECODE=1 and nothing precompiled);
- phases: the same command in one fresh interpreter with each phase of the predict path timed exclusively
  (a phase's time excludes the phases it calls): CLI import, trace loading, call-frame building, estimator
  loading (registry, artifact, XGBoost), inference, event-loop replays, band, warehouse write; `other` is
  the rest (summaries, notes, iteration detection);
- ratios: predict wall / simulated calls, and `maya --help` wall; with `--large`, the same of each run named;
  with `--emulate`, the 3-step emulate (`benchmarks/emulator.py`'s 1.3B GPT) with its CPU seconds by phase (CLI
  import, device-time oracle named, conversion to Parquet, run written, the rest of the launcher, the zygote's
  imports, the rank), and emulated / predicted step.
  Compiled / eager emulate wall is not measured here: a compiled rank compiles and autotunes for tens of CPU
  seconds (`docs/emulator.md` has the compile-once figures).

- suite rows (`--suite-rows EXPR`): the llm-foundry MPT rows the warehouse last stored (`maya validate
  llm-foundry`, a pandas query on `row` such as 'row % 3 == 0') predicted again from their cached traces in one
  process, as the suite's runner does with one job (its one-time costs, such as fitting the attention
  correction, paid once): wall and CPU seconds per row, and the largest relative change of any row's predicted
  step or band edge against the stored one (no prediction may move).

Predictions are recorded in a scratch copy of the warehouse (and its estimator artifacts), never in yours.
Without RUN, the newest demo run under $MAYA_HOME/runs is used, made with `maya demo` when there is none.
Wall time is inflated by other jobs on a shared machine: read the CPU seconds there.
Usage: python benchmarks/time_to_prediction.py [RUN] [--repeat K] [--large RUN ...] [--suite-rows EXPR] [--emulate]
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
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

TARGET_S = 3.0
LARGE_TARGET_S = 15.0
EMULATE_TARGET_S = 5.0
STEP_TARGET = 0.10
SUITE_TARGET_S, SUITE_ROWS = 20 * 60, 162
"""The 162-row MPT suite within 20 minutes on 2 cores: the per-row share of it."""
MAYA = [sys.executable, "-m", "maya"]
PHASES = (
    "CLI import",
    "trace loading",
    "rank expansion",
    "call-frame building",
    "host-time reading",
    "estimator loading",
    "inference",
    "sustained-clock pass",
    "rank folding",
    "replays",
    "contention",
    "per-rank reports",
    "band",
    "notes",
    "warehouse write",
    "other",
)
NOTES = (
    "stand_in_notes",
    "routing_notes",
    "flex_mask_notes",
    "subset_notes",
    "te_kernel_notes",
    "evaluation_notes",
    "host_notes",
    "timing_notes",
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
        ("maya.simulator.simulation", "expand", "rank expansion"),
        ("maya.simulator.simulation", "compile_rank", "call-frame building"),
        ("maya.simulator.pricing", "priced_frame", "call-frame building"),
        ("maya.simulator.pricing", "framework_ns", "host-time reading"),
        ("maya.simulator.simulation", "make_provider", "estimator loading"),
        ("maya.simulator.simulation", "price", "inference"),
        ("maya.simulator.sustained_clock", "apply", "sustained-clock pass"),
        ("maya.simulator.engine", "fold", "rank folding"),
        ("maya.simulator.engine", "Engine.run", "replays"),
        ("maya.simulator.simulation", "contend", "contention"),
        ("maya.simulator.predict", "rank_reports", "per-rank reports"),
        ("maya.simulator.band", "rank_reports", "per-rank reports"),
        *(("maya.simulator.predict", note, "notes") for note in NOTES),
        ("maya.api", "record", "warehouse write"),
    ):
        owner = import_module(module)
        *path, attr = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if hasattr(owner, attr):  # an older checkout (PYTHONPATH) may lack a phase: it counts as `other` there
            setattr(owner, attr, phases.wrap(name, getattr(owner, attr)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        maya.cli.app(["predict", run, "--json"], standalone_mode=False)
    total_wall, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    phases.wall["other"] = total_wall - sum(phases.wall.values())
    phases.cpu["other"] = total_cpu - sum(phases.cpu.values())
    prediction = json.loads(out.getvalue())
    print(json.dumps({"wall": phases.wall, "cpu": phases.cpu, "calls": prediction["simulated_calls"]}))


def suite_child(expr: str) -> None:
    """Predict the stored llm-foundry rows `expr` picks from their cached traces, in this process as the suite's
    runner does with one job; print one JSON line per row (wall, CPU, the largest relative change of the predicted
    step and band edges against the stored row)."""
    from maya.api import predict
    from maya.core.warehouse import read_only
    from maya.validation.plan import row_options
    from maya.validation.runner import traces_dir

    with read_only() as con:
        stored = con.execute(
            "SELECT row, command_hash, hardware, cluster, estimator_version, predicted_s, band_low_s, band_high_s "
            "FROM validation_rows WHERE kind = 'llm-foundry' AND status = 'ok' "
            "QUALIFY row_number() OVER (PARTITION BY row ORDER BY recorded_at DESC) = 1 ORDER BY row"
        ).df()
    for values in stored.query(expr).itertuples():
        run = traces_dir() / values.command_hash
        if not run.is_dir():
            continue
        options = row_options(values.hardware, values.cluster, values.estimator_version)
        t, c = time.perf_counter(), time.process_time()
        p = predict(run, options)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        got = (p.iteration_ns, p.band["low_ns"], p.band["high_ns"]) if p.band else (p.iteration_ns,)
        was = (values.predicted_s, values.band_low_s, values.band_high_s)
        change = max(abs(a / 1e9 / b - 1.0) for a, b in zip(got, was))
        print(
            json.dumps({"row": int(values.row), "wall": wall, "cpu": cpu, "change": change, "calls": p.simulated_calls})
        )


def suite_rows(expr: str, env: dict[str, str]) -> list[tuple]:
    """Table rows of `suite_child` run in a fresh interpreter: per row, then the suite's mean and slowest."""
    child = subprocess.run(
        [sys.executable, __file__, "--suite-child", expr], env=env, check=True, capture_output=True, text=True
    )
    found = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    if not found:
        return [(f"suite rows {expr!r}: none stored with a cached trace", None, None, "", "")]
    rows = [
        (f"  row {r['row']} ({r['calls']:,} calls)", r["wall"], r["cpu"], f"{r['change']:.0e}", "change <= 1e-3")
        for r in found
    ]
    wall, cpu = sum(r["wall"] for r in found), sum(r["cpu"] for r in found)
    slowest = max(found, key=lambda r: r["cpu"])
    return [
        *rows,
        (f"suite rows {expr!r}: {len(found)} predicted", wall, cpu, "", ""),
        ("  per row (mean)", wall / len(found), cpu / len(found), "", f"<= {SUITE_TARGET_S / SUITE_ROWS:.1f} s"),
        (f"  slowest row ({slowest['row']})", slowest["wall"], slowest["cpu"], "", ""),
        ("  largest change of a figure", None, None, f"{max(r['change'] for r in found):.0e}", "<= 1e-3"),
    ]


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


def emulate_rows(warehouse: Path) -> list[tuple]:
    """Table rows of the 3-step 1.3B GPT emulate and of its steady emulated step against the H100 step
    `maya predict` gives for a 10-step emulate of it (`benchmarks/emulator.py`)."""
    from emulator import gpt_step, phases

    from maya.emulator.build import build

    work = Path(tempfile.mkdtemp())
    try:
        build(work / "build")  # built before timing
        by_phase = phases(work / "build", work / "phases")
        wall, cpu, _, _, _ = gpt_step(work, work / "build", 3)
        _, _, run, steady, _ = gpt_step(work, work / "build", 10)
        predicted = subprocess.run(
            [*MAYA, "predict", str(run), "--hardware", "h100-sxm", "--json"],
            env={**os.environ, "MAYA_WAREHOUSE": str(warehouse)},
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step_ms, predicted_ms = statistics.median(steady), json.loads(predicted.stdout)["iteration_ms"]
    return [
        ("emulate 1.3B GPT, 3 steps", wall, cpu, f"{wall / EMULATE_TARGET_S:.2f}", f"<= {EMULATE_TARGET_S:g} s wall"),
        *((f"  {name}", None, seconds, "", "") for name, seconds in by_phase["cpu"].items()),
        (
            f"emulated step / H100 step ({step_ms:.1f} / {predicted_ms:.0f} ms)",
            None,
            None,
            f"{step_ms / predicted_ms:.3f}",
            f"<= {STEP_TARGET:g}",
        ),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", nargs="?", type=Path, help="run directory (default: the newest demo run)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--large", type=Path, nargs="*", default=[], help="larger runs to time `maya predict` on")
    p.add_argument("--emulate", action="store_true", help="also emulate the 1.3B GPT (minutes on a loaded machine)")
    p.add_argument("--suite-rows", help="also predict these stored MPT rows from the capture cache ('row %% 3 == 0')")
    p.add_argument("--phases-child", help=argparse.SUPPRESS)
    p.add_argument("--suite-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phases_child:
        phases_child(args.phases_child)
        return
    if args.suite_child:
        suite_child(args.suite_child)
        return
    run = str((args.run or demo_run()).resolve())
    rows: list[tuple] = []  # (figure, wall s, cpu s, ratio, target)
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = scratch_warehouse(Path(tmp))
        warm = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        warm["MAYA_WAREHOUSE"] = str(warehouse)
        cold = {**warm, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "no-bytecode")}
        predict = [*MAYA, "predict", run, "--json"]
        timed_run(predict, warm)  # writes the bytecode caches
        best, best_cpu = min(timed_run(predict, warm) for _ in range(args.repeat))
        cold_wall, cold_cpu = timed_run(predict, cold)
        help_wall, help_cpu = min(timed_run([*MAYA, "--help"], warm) for _ in range(args.repeat))
        child = subprocess.run(
            [sys.executable, __file__, "--phases-child", run], env=warm, check=True, capture_output=True, text=True
        )
        phases = json.loads(child.stdout.splitlines()[-1])
        for name in PHASES:
            rows.append((f"  {name}", phases["wall"].get(name, 0.0), phases["cpu"].get(name, 0.0), "", ""))
        rows.append(("  total (in process)", sum(phases["wall"].values()), sum(phases["cpu"].values()), "", ""))
        calls = phases["calls"]
        rows += [
            (f"maya predict, best of {args.repeat}", best, best_cpu, f"{best / TARGET_S:.2f}", f"<= {TARGET_S:g} s"),
            ("maya predict, no bytecode cached", cold_wall, cold_cpu, "", ""),
            (f"  per simulated call ({calls:,})", best / calls, best_cpu / calls, "", ""),
            ("maya --help", help_wall, help_cpu, "", ""),
        ]
        for large in args.large:
            command = [*MAYA, "predict", str(large.resolve()), "--json"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            out = subprocess.run(command, env=warm, check=True, capture_output=True, text=True).stdout
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            n = json.loads(out)["simulated_calls"]
            target = f"<= {LARGE_TARGET_S:g} s at 8 M calls"
            rows.append((f"maya predict {large.name}", wall, cpu, f"{wall / LARGE_TARGET_S:.2f}", target))
            rows.append((f"  per simulated call ({n:,})", wall / n, cpu / n, "", ""))
        if args.suite_rows:
            rows += suite_rows(args.suite_rows, warm)
        if args.emulate:
            rows += emulate_rows(warehouse)
    print(f"maya predict {run}  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"{'phase or figure':<48}{'wall s':>11}{'cpu s':>11}{'ratio':>8}  target")
    for figure, wall, cpu, ratio, target in rows:
        seconds = "".join(f"{x:>11.3g}" if x is not None else f"{'':>11}" for x in (wall, cpu))
        print(f"{figure:<48}{seconds}{ratio:>8}  {target}")


if __name__ == "__main__":
    main()
