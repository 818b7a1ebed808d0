"""The `workload` command of the profiler's command line (`run_on_device.py workload`, `python -m
maya.profiler workload`); `maya profile workload` builds the same request:

    workload --out RUN -- python SCRIPT ARGS                   trace the whole script (torch.profiler)
    workload --out DIR --measure [--name N] -- python SCRIPT ARGS
                                                               ground truth of one script into DIR
    workload --out DIR --suite FILE [--budget-min 8]           the suite's configs not yet in DIR, each
                                                               in a fresh process, within the budget
    workload --out DIR --suite FILE --config NAME              one config of the suite, in this process

Measurement options: --warmup 5 --iterations 10 [--iterations-by torch.Tensor.backward].
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported only when a workload command runs
    from .measure import MeasureSettings


class UsageError(ValueError):
    """Options that do not go together."""


@dataclass(frozen=True)
class WorkloadRequest:
    out: Path
    argv: list[str] = field(default_factory=list)
    """The script and its arguments (`SCRIPT ARGS` or `-m MODULE ARGS`)."""
    hardware: str | None = None
    measure: bool = False
    name: str | None = None
    suite: Path | None = None
    config: str | None = None
    budget_min: float = 8.0
    warmup: int = 5
    iterations: int = 10
    iterations_by: str | None = None

    def check(self) -> None:
        if self.suite is not None:
            if self.argv or self.measure or self.name:
                raise UsageError("--suite takes no script, --measure or --name")
        elif self.config is not None:
            raise UsageError("--config names a config of a --suite")
        elif not self.argv:
            raise UsageError("give the script after --, e.g. `-- python train.py --steps 3`")
        elif self.name and not self.measure:
            raise UsageError("--name is for --measure")
        try:
            _ = self.measure_settings  # parses the settings: an error is a usage error
        except ValueError as e:
            raise UsageError(str(e)) from None

    @property
    def measure_settings(self) -> MeasureSettings:
        from .measure import MeasureSettings

        return MeasureSettings(self.warmup, self.iterations, self.iterations_by)


def script_argv(words: Sequence[str]) -> list[str]:
    """`-- python SCRIPT ARGS` / `python -m MODULE ARGS` / `SCRIPT ARGS` -> `SCRIPT ARGS` or `-m MODULE ARGS`."""
    argv = list(words[1:] if words[:1] == ["--"] else words)
    return argv[1:] if argv and Path(argv[0]).name.startswith("python") else argv


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, required=True, help="run directory (trace) or results directory (--measure, --suite)"
    )
    parser.add_argument("--hardware", help="hardware catalog name of the GPU, e.g. h100-sxm")
    parser.add_argument(
        "--measure",
        action="store_true",
        help="ground truth: time warm-up + measured iterations, memory peaks, a 2-iteration trace",
    )
    parser.add_argument("--name", help="config name of a --measure run (default: the script's name)")
    parser.add_argument("--suite", type=Path, help="suite file (.py defining CONFIGS, or .json)")
    parser.add_argument("--config", help="measure only this config of the --suite, in this process")
    parser.add_argument("--budget-min", type=float, default=8.0, help="suite time budget (default 8 minutes)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations (default 5)")
    parser.add_argument("--iterations", type=int, default=10, help="measured iterations (default 10)")
    parser.add_argument(
        "--iterations-by",
        help="dotted path of the function whose calls end iterations, "
        "for scripts without an optimizer (e.g. torch.Tensor.backward)",
    )
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- python SCRIPT ARGS")


def request_from_args(args: argparse.Namespace) -> WorkloadRequest:
    return WorkloadRequest(
        args.out,
        script_argv(args.script),
        args.hardware,
        args.measure,
        args.name,
        args.suite,
        args.config,
        args.budget_min,
        args.warmup,
        args.iterations,
        args.iterations_by,
    )


def run_request(request: WorkloadRequest, log: Callable[[str], None] = print) -> int:
    """Do what the request asks; the exit status: 1 when a measured config ends in `error` or
    `timeout` (an out-of-memory result is a result), else 0. Raises UsageError."""
    request.check()
    if request.suite is not None and request.config is None:
        from .suite import SuiteSettings, run_suite

        settings = SuiteSettings(budget_s=request.budget_min * 60, measure=request.measure_settings)
        result = run_suite(request.out, request.suite, settings, hardware=request.hardware, log=log)
        for line in result.summary_lines():
            log(line)
        return 0
    if request.suite is not None or request.measure:
        from .measure import measure_workload
        from .results import summary, workload_name
        from .suite import measure_suite_config

        if request.suite is not None:
            row = measure_suite_config(
                request.out, request.suite, request.config, request.measure_settings, hardware=request.hardware
            )
        else:
            row = measure_workload(
                request.argv,
                request.out,
                request.name or workload_name(request.argv),
                request.measure_settings,
                hardware=request.hardware,
            )
        log(summary(row))
        return 0 if row["status"] in ("ok", "oom") else 1
    from .trace import profile_workload

    run_dir = profile_workload(request.argv, request.out, hardware=request.hardware)
    log(f"profiled {' '.join(request.argv)} into {run_dir}")
    return 0
