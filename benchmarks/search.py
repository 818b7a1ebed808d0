"""`maya search` benchmark: CMA-ES with pruning against the exhaustive grid on a 768-point space (576
valid) of a 64-GPU FSDP2 + tensor-parallel GPT script (benchmarks/workloads/fsdp_tp_gpt.py: tp,
micro-batch size, recompute, sequence parallelism, FSDP resharding, param and gradient-reduce dtypes),
every point emulated on 64 virtual H100s and predicted (roofline durations, so figures do not depend on
which estimators are registered).

Targets (issue 9): CMA-ES within 2% of the grid's best, evaluating <= 30% of the valid points (a point
counts when it was emulated; points a pruning rule decides do not), the whole search in under 10 min.

    python benchmarks/search.py [--seeds 5]     CMA-ES runs of the real pipeline vs the stored grid
    python benchmarks/search.py --regrid        run (or resume) the exhaustive grid and store it
    python benchmarks/search.py --replay        CMA-ES answered from the stored grid's outcomes (algorithm
                                                only; time is the sum of the grid's measured seconds)
    python benchmarks/search.py --time-point    where one point's time goes (process start vs script)
    python benchmarks/search.py --analytical    algorithm only, on an analytical 7B model (no script)
    --parallel N emulates N points at once (grid and CMA-ES runs).

The grid is stored in benchmarks/results/search_fsdp_tp_grid.parquet (one row per point, the grid's
wall time in its metadata) and reused unless --regrid is given; its live log resumes after interruption.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from maya.core.hardware import DEFAULT_HARDWARE
from maya.core.paths import maya_home
from maya.search import (
    LocalExecutor,
    MayaEvaluator,
    Outcome,
    SearchLog,
    evaluator_salts,
    load_space,
    run_search,
    script_digest,
    search_id,
)

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "fsdp_tp_gpt.py"
SPACE_FILE = HERE / "workloads" / "fsdp_tp_gpt_space.yaml"
GRID_FILE = HERE / "results" / "search_fsdp_tp_grid.parquet"
COMMAND = [
    str(WORKLOAD),
    "--tp",
    "{tp}",
    "--mbs",
    "{mbs}",
    "--recompute",
    "{recompute}",
    "{sp}",
    "{reshard}",
    "--params",
    "{params}",
    "--reduce",
    "{reduce}",
]
DURATIONS = "roofline"
GAP, SHARE, SECONDS = 0.02, 0.30, 600.0


def space():
    return load_space(SPACE_FILE, COMMAND)


def evaluator(out_dir: Path) -> MayaEvaluator:
    salts = evaluator_salts(DEFAULT_HARDWARE, 8, DURATIONS, None, script=script_digest([str(WORKLOAD)]))
    return MayaEvaluator(str(out_dir), salts, DEFAULT_HARDWARE, 8, DURATIONS)


def regrid(parallel: int) -> None:
    """Run the exhaustive grid (resuming its log) and store every point with the grid's wall time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = maya_home() / "benchmarks" / "search-grid"
    sp, ev = space(), evaluator(work)
    log = SearchLog(search_id(sp, "grid", "time", 0, ev.salts.search, None), work / "warehouse.duckdb")
    log.open(sp.digest(), COMMAND, {"algorithm": "grid", "durations": DURATIONS})
    clock = work / "wall_s"
    before = float(clock.read_text()) if clock.exists() and log.points() else 0.0
    t0 = time.monotonic()

    def show(record, result) -> None:
        clock.write_text(str(before + time.monotonic() - t0))
        o = record.outcome
        print(
            f"[{len(result.records)}/{result.valid_points}] {o.status:7} {o.source:13} {o.seconds:6.1f} s  "
            f"{record.params}",
            flush=True,
        )

    result = run_search(
        sp, ev, algorithm="grid", log=log, parallel=parallel, executor=LocalExecutor(parallel), on_record=show
    )
    wall = before + time.monotonic() - t0
    rows = [
        {"point": json.dumps(r.params, sort_keys=True, default=str), **r.outcome.to_dict(), "objective": r.objective}
        for r in result.records
    ]
    for row in rows:
        row["extra"] = json.dumps(row["extra"])
    table = pa.Table.from_pylist(rows)
    meta = {
        "wall_s": str(wall),
        "evaluations": str(sum(r.outcome.counts for r in result.records)),
        "space_size": str(sp.size),
        "valid_points": str(result.valid_points),
        "durations": DURATIONS,
        "parallel": str(parallel),
    }
    GRID_FILE.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table.replace_schema_metadata(
            {**(table.schema.metadata or {}), **{k.encode(): v.encode() for k, v in meta.items()}}
        ),
        GRID_FILE,
    )
    print(f"grid stored in {GRID_FILE}: {len(rows)} points, wall {wall:.0f} s")


def load_grid() -> tuple[dict[str, Outcome], dict[str, float], dict[str, str]]:
    """The stored grid: outcome and objective by point key, and its metadata."""
    import pyarrow.parquet as pq

    if not GRID_FILE.exists():
        raise SystemExit(f"no stored grid at {GRID_FILE}: run `python benchmarks/search.py --regrid` first")
    table = pq.read_table(GRID_FILE)
    outcomes, objectives = {}, {}
    for row in table.to_pylist():
        row["extra"] = json.loads(row["extra"] or "{}")
        outcomes[row["point"]] = Outcome.from_dict(row)
        if row["objective"] is not None:
            objectives[row["point"]] = row["objective"]
    return (
        outcomes,
        objectives,
        {k.decode(): v.decode() for k, v in table.schema.metadata.items() if not k.startswith(b"ARROW")},
    )


class Replay:
    """Answers a point from the stored grid (what emulate + predict gave it there). A point the grid's
    rules decided out of memory without emulating it is out of memory here too."""

    def __init__(self, outcomes: dict[str, Outcome]):
        self.outcomes = outcomes

    def __call__(self, task, known) -> Outcome:
        o = self.outcomes[task.key]
        status = "oom" if o.status == "pruned" else o.status
        return Outcome(
            status,
            o.iteration_ns,
            o.peak_memory_bytes,
            o.mfu,
            world_size=o.world_size,
            reason=o.reason,
            seconds=o.seconds if o.source == "evaluated" else 0.0,
        )


def cmaes(seeds: int, replay: bool, parallel: int) -> None:
    outcomes, objectives, meta = load_grid()
    best_key = min(objectives, key=objectives.get)
    best = objectives[best_key]
    sp = space()
    valid = len(sp.valid_points())
    evaluated = [o.seconds for o in outcomes.values() if o.source == "evaluated" and o.status != "pruned"]
    print(f"space: {sp.size} points, {valid} valid; 64 GPUs; {WORKLOAD.name}, durations {DURATIONS}")
    print(
        f"grid (stored): best {best * 1e3:.1f} ms/iter {best_key}; {meta['evaluations']} emulated, wall "
        f"{float(meta['wall_s']):.0f} s; emulate+predict per point: mean {statistics.mean(evaluated):.1f} s, "
        f"median {statistics.median(evaluated):.1f} s"
    )
    passed = 0
    for seed in range(seeds):
        with tempfile.TemporaryDirectory() as tmp:
            ev = Replay(outcomes) if replay else evaluator(Path(tmp) / "out")
            salt = "replay" if replay else ev.salts.search
            log = SearchLog(search_id(sp, "cmaes", "time", seed, salt, None), Path(tmp) / "warehouse.duckdb")
            log.open(sp.digest(), COMMAND, {"algorithm": "cmaes", "seed": seed})
            t0 = time.monotonic()
            result = run_search(sp, ev, algorithm="cmaes", seed=seed, log=log, parallel=1 if replay else parallel)
            wall = time.monotonic() - t0
        if replay:
            wall = sum(r.outcome.seconds for r in result.records if r.outcome.counts)
        gap = result.best.objective / best - 1
        share = result.evaluations / valid
        ok = gap <= GAP and share <= SHARE and wall <= SECONDS
        passed += ok
        print(
            f"cmaes seed {seed}: best {result.best.objective * 1e3:.1f} ms/iter ({gap:+.2%} vs grid); "
            f"{result.evaluations}/{valid} evaluated ({share:.0%}), {_count(result, 'pruned')} pruned; "
            f"{'emulation time replayed from the grid' if replay else 'wall'} {wall:.0f} s; "
            f"{'PASS' if ok else 'FAIL'}",
            flush=True,
        )
    print(f"{passed}/{seeds} seeds meet all targets (<= {GAP:.0%} gap, <= {SHARE:.0%} evaluated, <= {SECONDS:.0f} s)")


def time_point() -> None:
    """One point's emulate + predict, against a capture of a script that only starts (imports torch,
    joins the 64-rank process group, exits): CPU seconds (user + system, which do not grow when other
    work shares the cores) of the rank processes (verification captures included), of this process
    (turning captures into the trace, deduplication) and of the prediction. The first emulation also
    starts the zygote the ranks fork from (once per process)."""
    import resource

    from maya.emulator.launcher import Topology, emulate
    from maya.simulator.predict import predict

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    sp = space()
    point = sp.point(
        {"tp": 4, "mbs": 2, "recompute": "mlp", "sp": True, "reshard": False, "params": "bf16", "reduce": "fp32"}
    )
    argv, _ = sp.render(point)
    with tempfile.TemporaryDirectory() as tmp:
        for name, cmd in (
            ("startup only", [str(HERE / "workloads" / "startup.py")]),
            ("point", argv),
            ("point again", argv),
        ):
            ranks, c0, t0 = [], cpu(), time.monotonic()
            run_dir = Path(tmp) / name.replace(" ", "_")
            r = emulate(cmd, run_dir, topology=Topology(8, 8), on_rank_done=ranks.append)
            line = (
                f"{name}: {r.status}; emulate {time.monotonic() - t0:.1f} s wall, rank processes "
                f"{r.capture_cpu_seconds:.1f} s CPU, launcher {cpu() - c0:.1f} s CPU (kept: "
                + ", ".join(f"rank {x.rank} {x.seconds:.1f} s wall, {x.calls} calls" for x in ranks)
                + ")"
            )
            if name != "startup only":
                c1, t1 = cpu(), time.monotonic()
                predict(run_dir, hardware=DEFAULT_HARDWARE, durations=DURATIONS)
                line += f"; predict {time.monotonic() - t1:.1f} s wall, {cpu() - c1:.1f} s CPU"
            print(line, flush=True)


def analytical(seeds: int) -> None:
    import sys

    sys.path.insert(0, str(HERE))
    from search_analytical import COMMAND as CMD
    from search_analytical import GPUS, SPACE, model

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm, seed in [("grid", 0)] + [("cmaes", s) for s in range(seeds)]:
            sp = load_space(SPACE, CMD, gpus=GPUS)
            # a warehouse per run: no run answers points from another's command cache
            log = SearchLog(search_id(sp, algorithm, "time", seed, "", None), Path(tmp) / f"{algorithm}{seed}.duckdb")
            log.open(sp.digest(), CMD, {})
            t0 = time.monotonic()
            results[algorithm, seed] = (
                run_search(sp, model, algorithm=algorithm, seed=seed, log=log),
                time.monotonic() - t0,
            )
    grid, grid_s = results["grid", 0]
    valid = grid.valid_points
    print(
        f"ALGORITHM ONLY (analytical 7B model, no emulation): {load_space(SPACE, CMD, gpus=GPUS).size} points, "
        f"{valid} valid; grid best {grid.best.objective * 1e3:.1f} ms/iter, {grid.evaluations} evaluated, "
        f"{grid_s:.1f} s"
    )
    for seed in range(seeds):
        r, s = results["cmaes", seed]
        gap = r.best.objective / grid.best.objective - 1
        print(
            f"cmaes seed {seed}: {gap:+.2%} vs grid; {r.evaluations}/{valid} evaluated "
            f"({r.evaluations / valid:.0%}), {_count(r, 'pruned')} pruned; {s:.1f} s; "
            f"{'PASS' if gap <= GAP and r.evaluations <= SHARE * valid else 'FAIL'}"
        )


def _count(result, status: str) -> int:
    return sum(r.outcome.status == status for r in result.records)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--regrid", action="store_true", help="run (or resume) the exhaustive grid and store it")
    mode.add_argument("--replay", action="store_true", help="CMA-ES answered from the stored grid")
    mode.add_argument("--time-point", action="store_true", help="where one point's time goes")
    mode.add_argument("--analytical", action="store_true", help="algorithm only, analytical model")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--parallel", type=int, default=1, help="points emulated at once")
    args = p.parse_args()
    if args.regrid:
        regrid(args.parallel)
    elif args.time_point:
        time_point()
    elif args.analytical:
        analytical(args.seeds)
    else:
        cmaes(args.seeds, args.replay, args.parallel)


if __name__ == "__main__":
    main()
