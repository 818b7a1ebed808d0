"""Simulator speed on synthetic GPT-like 3D-parallel training traces (`maya.simulator.trace_builder.gpt_3d`:
32 layers, 1F1B pipeline, tensor-parallel all-reduces, data-parallel reduce-scatter/all-gather).

1. Replay throughput: TP8 x PP8 (64 ranks, every rank captured), simulated calls per second of the
   event loop, and of the whole prediction (load, compile, price, replay, report).
2. TP8 x PP8 x DP16 = 1024 GPUs, deduplicated (one captured rank per pipeline stage standing for its
   128 ranks): the whole `predict` of the job.

Targets: >= 1 M simulated calls/s in the event loop; the 1024-GPU prediction in < 30 s.
Durations: the analytical roofline (nothing trained is needed). Figures are the best of --repeat runs.
Usage: python benchmarks/simulator.py [--repeat N] [--microbatches M] [--dir DIR]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from maya.simulator import predict
from maya.simulator.trace_builder import gpt_3d

CALLS_PER_S_TARGET, JOB_SECONDS_TARGET = 1e6, 30.0


def _best_predict(run_dir: Path, repeat: int):
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        prediction, _ = predict(run_dir, durations="roofline", store=False)
        total = time.perf_counter() - t
        if best is None or total < best[1]:
            best = (prediction, total)
    return best


def _report(title: str, run_dir: Path, gen_s: float, repeat: int) -> tuple[float, float]:
    prediction, total = _best_predict(run_dir, repeat)
    rate = prediction.simulated_calls / prediction.simulation_s
    print(f"{title}: {prediction.simulated_ranks} simulated ranks ({prediction.captured_ranks} captured), "
          f"{prediction.simulated_calls:,} calls (trace written in {gen_s:.1f} s)")
    print(f"  event loop     {prediction.simulation_s:7.2f} s  {rate / 1e6:6.2f} M calls/s  "
          f"({rate / CALLS_PER_S_TARGET:.2f}x the 1 M/s target)")
    print(f"  whole predict  {total:7.2f} s  {prediction.simulated_calls / total / 1e6:6.2f} M calls/s")
    print(f"  predicted iteration {prediction.iteration_ns / 1e6:.1f} ms, MFU {prediction.mfu:.1%}, exposed "
          f"communication {prediction.exposed_comm_ns / prediction.iteration_ns:.0%} (roofline durations)")
    return rate, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=16)
    p.add_argument("--dir", type=Path, default=None)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        t = time.perf_counter()
        gpt_3d(8, 8, 1, microbatches=args.microbatches, dedup=False).write(base / "tp8pp8")
        rate, _ = _report("TP8 x PP8", base / "tp8pp8", time.perf_counter() - t, args.repeat)

        t = time.perf_counter()
        gpt_3d(8, 8, 16, microbatches=args.microbatches).write(base / "tp8pp8dp16")
        job_rate, job_s = _report("TP8 x PP8 x DP16", base / "tp8pp8dp16", time.perf_counter() - t, args.repeat)
        print(f"1024-GPU prediction: {job_s:.1f} s ({JOB_SECONDS_TARGET / job_s:.1f}x under the "
              f"{JOB_SECONDS_TARGET:.0f} s target)" if job_s < JOB_SECONDS_TARGET else
              f"1024-GPU prediction: {job_s:.1f} s, over the {JOB_SECONDS_TARGET:.0f} s target")
        print(f"event loop: {min(rate, job_rate) / 1e6:.2f}-{max(rate, job_rate) / 1e6:.2f} M calls/s "
              f"(target {CALLS_PER_S_TARGET / 1e6:.0f} M/s)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
