"""Reliability figures (issue 20): how much bad input Maya was fed and what held, and how its writers fare
when killed — the way DuckDB and SQLite publish their fuzzing and crash testing.

1. Fuzzing: every input surface of `tests/reliability/*_inputs.py` (trace files and `maya trace validate`,
   Kineto JSON, search spaces and expressions, estimator call frames, measured datasets and `maya
   estimators eval` in NeuSight's and the kernel campaigns' layouts and in Vidur's compute and collectives
   layouts, cluster specs and the hardware catalog, the read-only SQL gate) gets `--inputs`
   generated inputs (hypothesis, seeded). Per surface: inputs tried, accepted, refused with a documented
   error, statements the SQL gate refused, and the targets — crashes (another exception), hangs (past the
   surface's time limit) and wrong answers returned or stored: all must be 0.
2. Crash safety: every writer of `tests/reliability/crash_scenarios.py` (the trace writer writing a run
   part by part, trace files rewritten in place,
   a Kineto import, the warehouse's run catalog, the estimator registry, the search log, the predictions
   store, `maya validate`'s results, a pipeline partition) is SIGKILLed `--kills` times at random points,
   forked from this preloaded process. Per writer: kills that landed, stored states neither old nor new
   (data lost or corrupted), resumed runs that differ from an uninterrupted one, hangs — all must be 0 —
   and temporary files a kill left behind (ignored by readers).

Each surface runs in a forked child with a wall limit, so a surface that hangs in C code is counted, not
waited for. Usage:
    python benchmarks/reliability.py [--inputs 2000] [--kills 50] [--seed 0] [--only NAME,...] [--no-crash]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the harness is tests/reliability/; this script's own folder would shadow it (this file is `reliability` too)
sys.path[:] = [str(REPO / "tests")] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]

from reliability.crash import in_child, kill_trials  # noqa: E402
from reliability.crash_scenarios import scenarios  # noqa: E402
from reliability.harness import SURFACES, load, tally  # noqa: E402

SURFACE_LIMIT_S = 4 * 3600


def fuzz_figures(inputs: int, seed: int, only: set[str] | None) -> list:
    rows = []
    for name in SURFACES:
        if only and name not in only:
            continue

        def run(name=name):  # in a child: the surface's setup (a trained estimator, say) stays there
            warnings.simplefilter("ignore")
            return tally(load(name), inputs, seed)

        kind, result = in_child(run, timeout_s=SURFACE_LIMIT_S)
        if kind != "ok":
            print(f"{name}: the surface's run ended with {kind} {result or ''}", flush=True)
            continue
        rows.append(result)
        print(_fuzz_line(result), flush=True)
        for example in result.examples:
            print(f"    {example[:400]}", flush=True)
    return rows


def _fuzz_line(t) -> str:
    return (
        f"{t.surface:<22} {t.tried:>6} {t.accepted:>8} {t.refused:>7} {t.gate_refusals:>8} {t.crashes:>7} "
        f"{t.hangs:>5} {t.corrupt:>7} {t.seconds:>7.0f} s"
    )


def crash_figures(kills: int, seed: int, only: set[str] | None) -> list:
    rows = []
    for scenario in scenarios():
        if only and scenario.name not in only:
            continue
        t = kill_trials(scenario, kills, seed)
        rows.append(t)
        print(
            f"{t.scenario:<30} {t.trials:>6} {t.killed:>6} {t.corrupt:>13} {t.not_resumed:>11} {t.hangs:>5} "
            f"{t.leftovers:>9} {t.seconds:>7.0f} s",
            flush=True,
        )
        for example in t.examples:
            print(f"    {example[:400]}", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", type=int, default=2000, help="generated inputs per surface")
    p.add_argument("--kills", type=int, default=50, help="kills per writer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=None, help="comma-separated surface or writer names")
    p.add_argument("--no-fuzz", action="store_true")
    p.add_argument("--no-crash", action="store_true")
    args = p.parse_args()
    only = set(args.only.split(",")) if args.only else None
    os.environ.setdefault("MAYA_HOME", str(Path(os.environ.get("TMPDIR", "/tmp")) / "maya-reliability-home"))
    print(f"maya reliability: seed {args.seed}, load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}")
    if not args.no_fuzz:
        print(f"\nfuzzing, {args.inputs} generated inputs per surface (targets: crashes, hangs, corrupt = 0)")
        print(
            f"{'surface':<22} {'tried':>6} {'accepted':>8} {'refused':>7} {'stmts':>8} {'crashes':>7} {'hangs':>5} "
            f"{'corrupt':>7} {'time':>9}"
        )
        rows = fuzz_figures(args.inputs, args.seed, only)
        total = sum(r.tried for r in rows)
        bad = sum(r.crashes + r.hangs + r.corrupt for r in rows)
        print(
            f"{'total':<22} {total:>6} {sum(r.accepted for r in rows):>8} {sum(r.refused for r in rows):>7} "
            f"{sum(r.gate_refusals for r in rows):>8} {sum(r.crashes for r in rows):>7} "
            f"{sum(r.hangs for r in rows):>5} {sum(r.corrupt for r in rows):>7}   "
            f"({'met' if bad == 0 else 'NOT met'}: {bad} finding(s))"
        )
        print(
            "refused: a documented error naming the problem; stmts: statements the SQL gate refused "
            "(QueryRefused); corrupt: a wrong answer returned or stored"
        )
    if not args.no_crash:
        print(
            f"\ncrash safety, {args.kills} SIGKILLs per writer at random points (targets: corrupt, not resumed, "
            "hangs = 0)"
        )
        print(
            f"{'writer':<30} {'trials':>6} {'killed':>6} {'lost/corrupt':>13} {'not resumed':>11} {'hangs':>5} "
            f"{'leftovers':>9} {'time':>9}"
        )
        rows = crash_figures(args.kills, args.seed, only)
        bad = sum(r.corrupt + r.not_resumed + r.hangs for r in rows)
        print(
            f"{'total':<30} {sum(r.trials for r in rows):>6} {sum(r.killed for r in rows):>6} "
            f"{sum(r.corrupt for r in rows):>13} {sum(r.not_resumed for r in rows):>11} "
            f"{sum(r.hangs for r in rows):>5} {sum(r.leftovers for r in rows):>9}   "
            f"({'met' if bad == 0 else 'NOT met'})"
        )
        print(
            "killed: trials whose writer died before finishing (the rest finished before the kill point); "
            "leftovers: temporary files a kill left (readers skip them)"
        )


if __name__ == "__main__":
    main()
