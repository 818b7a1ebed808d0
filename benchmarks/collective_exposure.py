"""How much of a prediction's step each collective is, by kind, communicator size and message size: its calls,
device time and exposed time (moving data while no kernel runs) on the critical rank in the median steady
iteration, as the simulator priced and replayed it (for finding which collectives set a prediction's error, not a
prediction).

    .venv/bin/python benchmarks/collective_exposure.py RUN_DIR [--hardware a100-sxm-80gb] [--cluster dgx-a100]

A launch's transfer is the time from when its peers have all arrived to its end (`RankResult.launch_ready` to
`launch_end`); the exposed part is what of it no kernel of the rank covers. A grouped launch of several operations
is counted once, under its first operation.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from maya.api import PredictOptions, replay
from maya.simulator.intervals import union
from maya.simulator.opcodes import WORK, WORK_SYNC


def collective_exposure(run_dir: str, hardware: str | None = None, cluster: str | None = None) -> pd.DataFrame:
    """Per (collective, ranks, nodes, MiB) of the critical rank's median steady iteration: launches, transfer
    seconds and exposed seconds; the prediction's iteration seconds in `frame.attrs["iteration_s"]`."""
    done = replay(run_dir, PredictOptions(hardware=hardware, cluster=cluster, durations="estimators"))
    sim, prediction = done.simulation, done.prediction
    index = next(i for i, r in enumerate(sim.replicas) if r.rank == prediction.critical_rank)
    program, result, device = sim.replicas[index].program, sim.results[index], sim.devices[index]
    its = sim.iterations[program.rank]
    ends = np.maximum.accumulate(np.maximum.reduceat(result.end, its.bounds[:-1]))
    begins = np.concatenate([[0], ends[:-1]])
    steady = its.steady[np.argsort((ends - begins)[its.steady], kind="stable")[len(its.steady) // 2]]
    a, b = begins[steady], ends[steady]
    kernels = np.isin(program.opcodes, (WORK, WORK_SYNC)) & (device > 0)
    compute = union((result.end[kernels] - device[kernels], result.end[kernels]))
    ready = np.clip(result.launch_ready, a, b)
    end = np.clip(result.launch_end, a, b)
    first = [launch[0].call for launch in program.launches]
    frame = program.frame.iloc[first]
    rows = pd.DataFrame(
        {
            "collective": frame["collective"].astype(str).to_numpy(),
            "ranks": frame["comm_size"].fillna(1).astype(int).to_numpy(),
            "nodes": frame["comm_nodes"].fillna(1).astype(int).to_numpy(),
            "MiB": (frame["comm_bytes"].fillna(0.0) / 2**20).round(1).to_numpy(),
            "launches": 1,
            "transfer_s": (end - ready) / 1e9,
            "exposed_s": (end - ready - compute.covered(ready, end)) / 1e9,
        }
    )[end > ready]
    table = rows.groupby(["collective", "ranks", "nodes", "MiB"], as_index=False)[
        ["launches", "transfer_s", "exposed_s"]
    ].sum()
    table.attrs["iteration_s"] = prediction.iteration_ns / 1e9
    return table.sort_values("exposed_s", ascending=False).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--hardware")
    ap.add_argument("--cluster")
    args = ap.parse_args()
    table = collective_exposure(args.run_dir, args.hardware, args.cluster)
    print(f"predicted iteration {table.attrs['iteration_s']:.4f} s")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))


if __name__ == "__main__":
    main()
