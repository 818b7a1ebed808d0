"""Run an unmodified training script under torch.profiler and store its whole trace in maya_trace_spec.

Iterations are marked without touching the script: a global optimizer-step hook advances the
profiler, so each optimizer step becomes a `ProfilerStep#N` annotation in the trace. Ground-truth
measurement (timed iterations, memory peaks, a trace of two iterations) is `workload_measure`;
suites of configs are `workload_suite`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.profiler import ProfilerAction, ProfilerActivity, profile

from maya.core.script_runner import iteration_hook, run_script
from maya_trace_spec.interop.kineto import import_kineto


def profiler_activities() -> list[ProfilerActivity]:
    """What torch.profiler records: host activity, and CUDA activity when there is a GPU."""
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])


def profile_workload(argv: Sequence[str], out_dir: str | Path, *, hardware: str | None = None) -> Path:
    """Profile the script, write the Kineto JSON beside the run and import it as run `out_dir`."""
    if not argv:
        raise ValueError("no script given")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir}: output exists and is not empty")
    # A schedule (even "always record") is what makes step() emit the ProfilerStep#N annotations.
    with profile(
        activities=profiler_activities(),
        record_shapes=True,
        profile_memory=True,
        schedule=lambda _: ProfilerAction.RECORD,
    ) as prof:
        with iteration_hook(prof.step):
            run_script(argv)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=".kineto-", suffix=".json", dir=out_dir.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(raw)
        return import_kineto(
            [raw], out_dir, hardware=hardware, command=["python", *argv], framework=f"torch {torch.__version__}"
        )
    finally:
        os.unlink(raw)
