"""Ground truth of one training script, run unmodified in this process: warm-up iterations, then
measured iterations timed between optimizer steps (CUDA events on CUDA, else the wall clock), the
memory peaks, and a torch.profiler trace of two more iterations.

The profiler runs on a schedule driven by the same iteration hook: idle (`wait`) through warm-up and
measurement, so the timed iterations carry no profiling cost and CUPTI is not yet initialised, then
one profiler warm-up iteration and two recorded ones. The script is then stopped (`StopScript`), so
its own step count only needs to be large enough. torch.OutOfMemoryError is a result (status `oom`,
with the size asked for), as are other exceptions (`error`); neither ends the runner.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch.profiler import profile, schedule

from maya.core.script_runner import OPTIMIZER_STEP, StopScript, iteration_hook, run_script
from maya_trace_spec.interop.kineto import import_kineto

from ..device_info import describe_device, read_clocks, software_versions
from .results import config_columns, is_done, result_path, write_result
from .timing import DeviceClock, IterationStats, IterationTimer, iteration_clock
from .trace import profiler_activities

PROFILER_WARMUP = 1
PROFILED = 2
_OOM_RE = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class MeasureSettings:
    warmup: int = 5
    iterations: int = 10
    iterations_by: str | None = None
    """Dotted path of the function whose calls end iterations; None: optimizer steps."""

    def __post_init__(self):
        if self.warmup < 1 or self.iterations < 1:
            raise ValueError("need at least 1 warm-up iteration (the first has no start) and 1 measured")

    @property
    def measured_end(self) -> int:
        """Iterations ended when measurement is over."""
        return self.warmup + self.iterations

    @property
    def total(self) -> int:
        """Iterations the script must run: warm-up, measured, profiler warm-up, profiled."""
        return self.measured_end + PROFILER_WARMUP + PROFILED

    def as_config(self) -> dict:
        return {
            "warmup": self.warmup,
            "iterations": self.iterations,
            "iterations_by": self.iterations_by or OPTIMIZER_STEP,
        }


@dataclass
class _Outcome:
    status: str = "ok"
    error: str | None = None
    oom_requested_bytes: int | None = None
    memory: tuple[int | None, int | None] = (None, None)


def oom_requested_bytes(message: str) -> int | None:
    """The allocation size in torch's out-of-memory message ("Tried to allocate 2.50 GiB"), if any."""
    m = _OOM_RE.search(message)
    return round(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def _peak_memory(device: torch.device) -> tuple[int | None, int | None]:
    if device.type != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)


def _run(
    argv: Sequence[str], settings: MeasureSettings, timer: IterationTimer, device: torch.device, kineto: Path
) -> _Outcome:
    """Run the script under the iteration hook and the scheduled profiler (trace to `kineto`)."""
    outcome = _Outcome()
    plan = schedule(wait=settings.measured_end, warmup=PROFILER_WARMUP, active=PROFILED, repeat=1)
    with profile(
        activities=profiler_activities(),
        schedule=plan,
        record_shapes=True,
        profile_memory=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(kineto)),
    ) as prof:

        def on_iteration() -> None:
            timer.mark()
            if timer.count == settings.measured_end:
                outcome.memory = _peak_memory(device)
            prof.step()
            if timer.count == settings.total:
                raise StopScript

        with iteration_hook(on_iteration, settings.iterations_by):
            try:
                run_script(argv)
            except StopScript:
                return outcome
            except torch.OutOfMemoryError as e:
                outcome.status, outcome.error = "oom", f"{type(e).__name__}: {e}"
                outcome.oom_requested_bytes = oom_requested_bytes(str(e))
            except (Exception, SystemExit) as e:
                outcome.status, outcome.error = "error", "".join(traceback.format_exception(e))
            else:
                marked = "optimizer steps" if settings.iterations_by is None else settings.iterations_by
                outcome.status = "error"
                outcome.error = (
                    f"the script ended after {timer.count} iterations (marked by {marked}); "
                    f"{settings.total} are needed: {settings.warmup} warm-up, {settings.iterations} "
                    f"measured, {PROFILER_WARMUP + PROFILED} profiled: give it more steps"
                    + ("" if timer.count else ", or name what ends an iteration (--iterations-by)")
                )
    outcome.memory = _peak_memory(device)  # the script failed: its peaks up to the failure
    return outcome


def measure_workload(
    argv: Sequence[str],
    root: str | Path,
    name: str,
    settings: MeasureSettings = MeasureSettings(),
    *,
    hardware: str | None = None,
    attrs: dict | None = None,
    clock: DeviceClock | None = None,
) -> dict:
    """Measure the script `argv` (`script.py args` or `-m module args`) as config `name`: write its
    results row (and its trace run) under `root` and return the row. `attrs` are recorded in the
    config JSON; `clock` replaces the device's iteration clock (tests)."""
    root = Path(root)
    if is_done(root, name):
        raise FileExistsError(f"{result_path(root, name)}: {name} is already measured; delete it to measure again")
    trace_dir = root / "traces" / name
    shutil.rmtree(trace_dir, ignore_errors=True)  # an orphan of a run killed before its results row
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    info = describe_device(device)
    started_ns, t0 = time.time_ns(), time.perf_counter()
    versions = software_versions(info)
    clocks_start = read_clocks(info)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timer = IterationTimer(clock or iteration_clock(device))
    with tempfile.TemporaryDirectory(prefix="maya-workload-") as tmp:
        kineto = Path(tmp) / "kineto.json"
        outcome = _run(argv, settings, timer, device, kineto)
        traced = outcome.status == "ok" and kineto.exists()
        if traced:
            trace_dir.parent.mkdir(parents=True, exist_ok=True)
            import_kineto(
                [kineto],
                trace_dir,
                hardware=hardware,
                command=["python", *argv],
                framework=f"torch {torch.__version__}",
            )
    device_ns, host_ns = timer.durations(settings.warmup, settings.measured_end)
    complete = outcome.status == "ok" and len(device_ns) == settings.iterations
    stats = asdict(IterationStats.of(device_ns)) if complete else dict.fromkeys(f.name for f in fields(IterationStats))
    row = {
        **config_columns(name, argv, {**settings.as_config(), **(attrs or {})}),
        "status": outcome.status,
        "error": outcome.error,
        "hardware": hardware,
        "device_name": info.name,
        "driver_version": versions["driver"],
        "cuda_version": versions["cuda"],
        "torch_version": versions["torch"],
        "cudnn_version": None if versions["cudnn"] is None else str(versions["cudnn"]),
        "versions": json.dumps(versions),
        "clocks_start": json.dumps(clocks_start),
        "clocks_end": json.dumps(read_clocks(info)),
        "timing_source": timer.clock.source,
        "iterations_by": settings.iterations_by or OPTIMIZER_STEP,
        "warmup_iterations": settings.warmup,
        "measured_iterations": len(device_ns),
        "iteration_ns": device_ns,
        "host_iteration_ns": host_ns,
        **stats,
        "host_median_ns": IterationStats.of(host_ns).median_ns if complete else None,
        "max_memory_allocated_bytes": outcome.memory[0],
        "max_memory_reserved_bytes": outcome.memory[1],
        "oom": outcome.status == "oom",
        "oom_requested_bytes": outcome.oom_requested_bytes,
        "trace_path": f"traces/{name}" if traced else None,
        "trace_iterations": list(range(settings.measured_end + PROFILER_WARMUP, settings.total)) if traced else None,
        "started_at_ns": started_ns,
        "wall_s": time.perf_counter() - t0,
    }
    write_result(root, row)
    return row
