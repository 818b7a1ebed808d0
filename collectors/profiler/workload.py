"""Run an unmodified training script under torch.profiler and store its trace in maya_trace_spec.

Iterations are marked without touching the script: a global optimizer-step hook advances the
profiler, so each optimizer step becomes a `ProfilerStep#N` annotation in the trace.
"""
from __future__ import annotations

import os
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerAction, ProfilerActivity, profile

from maya_trace_spec.interop.kineto import import_kineto


def _run_script(argv: Sequence[str]) -> None:
    """Run `argv` (`script.py args` or `-m module args`) as `__main__` in this process."""
    saved = sys.argv[:]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv = saved


def profile_workload(argv: Sequence[str], out_dir: str | Path, *, hardware: str | None = None) -> Path:
    """Profile the script, write the Kineto JSON beside the run and import it as run `out_dir`."""
    if not argv:
        raise ValueError("no script given")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir}: output exists and is not empty")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    # A schedule (even "always record") is what makes step() emit the ProfilerStep#N annotations.
    with profile(activities=activities, record_shapes=True, profile_memory=True,
                 schedule=lambda _: ProfilerAction.RECORD) as prof:
        handle = register_optimizer_step_post_hook(lambda *_: prof.step())
        try:
            _run_script(argv)
        finally:
            handle.remove()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=".kineto-", suffix=".json", dir=out_dir.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(raw)
        return import_kineto([raw], out_dir, hardware=hardware, command=["python", *argv],
                             framework=f"torch {torch.__version__}")
    finally:
        os.unlink(raw)
