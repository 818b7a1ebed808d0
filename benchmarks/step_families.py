"""Device time of one steady optimizer step of a captured rank, by kernel family and by collective, as
the simulator priced it, optionally split by the phase each call ran in (for finding the mechanism behind a
prediction's error, not a prediction).

    .venv/bin/python benchmarks/step_families.py RUN_DIR --hardware h100-sxm --cluster dgx-h100 [--phases]

A call's phase is its op's in the trace (`ops.phase`: forward, backward, optimizer, eval; the emulator marks
it from autograd and the optimizer's `step`); calls without an op are `other`. Multi-tensor kernels (optimizer
steps, gradient norms and scales, `simulator.multi_tensor`), priced as elementwise adds, are named `optimizer`.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from maya.estimators.calls import MULTI_TENSOR_OP
from maya.simulator.predict import resolve_hardware
from maya.simulator.retarget import retarget
from maya.simulator.simulation import simulate
from maya.simulator.trace import load


def step_families(
    run_dir: str, hardware: str | None = None, cluster: str | None = None, phases: bool = False
) -> pd.DataFrame:
    """Seconds per steady step of each (kind, name) on the lowest captured rank: kernels by family,
    collectives by name and dtype, with call counts; with `phases`, of each (phase, kind, name)."""
    traces = load(run_dir)
    hw = resolve_hardware(traces, hardware)
    traces, assumptions = retarget(traces, hw, cluster=cluster)
    sim = simulate(traces, hw, "auto", cluster=cluster, reprice_collectives=bool(assumptions))
    rank = min(sim.programs)
    program, its = sim.programs[rank], sim.iterations[rank]
    frame = program.frame
    steady = np.zeros(program.n, dtype=bool)
    for i in its.steady:
        steady[its.bounds[i] : its.bounds[i + 1]] = True
    collective = frame["collective"].notna().to_numpy()
    kind = np.where(collective, "collective", "kernel")
    family = frame["family"].astype(str).where(frame["op"] != MULTI_TENSOR_OP, "optimizer")  # priced as elementwise
    name = np.where(collective, frame["collective"].astype(str) + " " + frame["comm_dtype"].astype(str), family)
    rows = pd.DataFrame({"kind": kind, "name": name, "device_s": program.device / 1e9, "calls": 1})
    keys = ["kind", "name"]
    if phases:
        ops = traces.ranks[rank].ops
        phase_of = pd.Series(ops["phase"].to_numpy(), index=ops["op_id"].to_numpy()) if "phase" in ops else None
        op_phase = frame["op_id"].map(phase_of) if phase_of is not None else pd.Series(np.nan, index=frame.index)
        rows["phase"] = op_phase.fillna("other").to_numpy()
        keys = ["phase", *keys]
    rows = rows[steady & (program.device > 0)]
    table = rows.groupby(keys, as_index=False)[["device_s", "calls"]].sum()
    table[["device_s", "calls"]] = table[["device_s", "calls"]] / len(its.steady)
    return table.sort_values([*keys[:-1], "device_s"], ascending=[True] * (len(keys) - 2) + [False, False]).reset_index(
        drop=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--hardware")
    ap.add_argument("--cluster")
    ap.add_argument("--phases", action="store_true", help="split each family by the phase its calls ran in")
    args = ap.parse_args()
    table = step_families(args.run_dir, args.hardware, args.cluster, args.phases)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))


if __name__ == "__main__":
    main()
