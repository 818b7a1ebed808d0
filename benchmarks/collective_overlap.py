"""Where a data-parallel step's collectives go, as the simulator priced and replayed them on the lowest captured
rank (for finding the mechanism behind a prediction's error, not a prediction): the steady step's span, the
time some kernel runs, the collectives per name and dtype (calls, mean size, priced time), the collective time
with no kernel beside it (exposed), and what the contention replay added to the kernels.

    .venv/bin/python benchmarks/collective_overlap.py RUN_DIR --hardware h100-sxm --cluster dgx-h100
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from maya.simulator.opcodes import WORK, WORK_SYNC
from maya.simulator.predict import resolve_hardware
from maya.simulator.retarget import retarget
from maya.simulator.simulation import Simulation, simulate
from maya.simulator.trace import load


def covered(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of the intervals [starts, ends)."""
    if not len(starts):
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    gaps = np.maximum(s[1:] - e[:-1], 0.0)
    return float(e[-1] - s[0] - gaps.sum())


def overlap_report(sim: Simulation) -> tuple[dict[str, float], pd.DataFrame]:
    """Milliseconds of the last steady step of the lowest captured rank (span, kernels running, kernel time,
    exposed collective time) and its collectives by name and dtype. Raises ValueError when that rank has no
    steady step or its last one runs no kernel (nothing to measure the collectives against)."""
    rank = min(sim.programs)
    program, its = sim.programs[rank], sim.iterations[rank]
    result = sim.result(rank)
    device = next(d for r, d in zip(sim.replicas, sim.devices) if r.rank == rank)
    if not len(its.steady):
        raise ValueError(f"rank {rank} shows no steady step: capture more iterations")
    step = its.steady[-1]
    lo, hi = its.bounds[step], its.bounds[step + 1]
    calls = np.arange(lo, hi)
    kernels = calls[np.isin(program.opcodes[calls], (WORK, WORK_SYNC)) & (device[calls] > 0)]
    if not len(kernels):
        raise ValueError(f"rank {rank}'s steady step {step} runs no kernel: nothing for its collectives to overlap")
    k_end = result.end[kernels].astype("float64")
    k_start = k_end - device[kernels]
    frame = program.frame
    rows = []
    exposed = 0.0
    for launch, call in enumerate(program.launch_call):
        if not lo <= call < hi:
            continue
        op = program.launches[launch][0].call
        end = float(result.launch_end[launch])
        start = end - float(device[op])
        beside = (k_end > start) & (k_start < end)
        exposed += (end - start) - covered(np.maximum(k_start[beside], start), np.minimum(k_end[beside], end))
        rows.append((frame.at[op, "collective"], frame.at[op, "comm_dtype"], frame.at[op, "comm_bytes"], device[op]))
    coll = pd.DataFrame(rows, columns=["collective", "dtype", "bytes", "ns"])
    table = coll.groupby(["collective", "dtype"]).agg(
        calls=("ns", "size"), mean_mb=("bytes", lambda b: b.mean() / 1e6), ms=("ns", lambda t: t.sum() / 1e6)
    )
    span = k_end.max() - k_start.min()
    figures = {
        "span_ms": span / 1e6,
        "kernels_running_ms": covered(k_start, k_end) / 1e6,
        "kernel_ms": float(device[kernels].sum()) / 1e6,
        "collective_ms": float(coll["ns"].sum()) / 1e6,
        "exposed_collective_ms": exposed / 1e6,
    }
    return figures, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--hardware")
    ap.add_argument("--cluster")
    args = ap.parse_args()
    traces = load(args.run_dir)
    hw = resolve_hardware(traces, args.hardware)
    traces, assumptions = retarget(traces, hw, cluster=args.cluster)
    runs = {
        label: simulate(traces, hw, "auto", cluster=args.cluster, reprice_collectives=bool(assumptions), contention=on)
        for label, on in (("without contention", False), ("with contention", True))
    }
    for label, sim in runs.items():
        try:
            figures, table = overlap_report(sim)
        except ValueError as e:
            raise SystemExit(f"{args.run_dir}: {e}") from None
        print(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    for note in runs["with contention"].notes:
        if note.startswith(("sustained clock", "power cap")):
            print(note)


if __name__ == "__main__":
    main()
