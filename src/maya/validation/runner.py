"""Running a suite: every selected row planned, emulated (once per identical command: traces are cached
under `$MAYA_HOME/validation/traces/<command hash>/`), predicted (once per identical trace, target and
estimator version), compared with its measurement and stored (`store.validation_rows`) as soon as it is
done. Rows already stored for the same suite content, estimator version and predictor are not run again
(a re-run resumes; rows that failed are tried again). A row that fails is stored with its reason and the
suite goes on."""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from maya.core.paths import maya_home

from .plan import RowPlan, predictor_digest
from .store import RowKey, RowResult, find_prediction, save, stored
from .suites import Suite

KINDS = {
    "llm-foundry": "maya.validation.llm_foundry",
    "neusight": "maya.validation.neusight",
    "megatron": "maya.validation.megatron",
    "modded-nanogpt": "maya.validation.modded_nanogpt",
}
"""The module of each suite kind: `plan(row, values) -> RowPlan`, `measured_s(values)` and
`predict(plan, run_dir, version, warehouse) -> Predicted`. Named, not imported: worker processes import
them by name."""
REASON_CHARS = 600
"""Longest reason stored for a row that failed."""


def traces_dir() -> Path:
    """Where emulated rows are kept, by command hash."""
    return maya_home() / "validation" / "traces"


@dataclass
class SuiteRun:
    suite: Suite
    version: str
    results: list[RowResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def assumptions(self) -> list[str]:
        return sorted({a for r in self.results for a in r.details.get("row_assumptions", [])})


@dataclass(frozen=True)
class _Task:
    """One row to evaluate (picklable: it goes to a worker process with `--jobs`)."""

    base: RowResult
    plan: RowPlan | None
    kind: str
    """The suite kind's module."""
    warehouse: str | None
    traces: str
    reuse: bool = True
    """Reuse a stored prediction of an identical trace."""


def resolve_version(version: str, warehouse: str | Path | None) -> str:
    """The registered estimator version `version` names (an alias such as `latest`, or a version)."""
    from maya.estimators import Registry

    return Registry(warehouse).get(version).version


def run_suite(
    suite: Suite,
    rows: pd.DataFrame,
    *,
    version: str = "latest",
    jobs: int = 1,
    warehouse: str | Path | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_row: Callable[[RowResult], None] | None = None,
    resume: bool = True,
    traces: Path | None = None,
) -> SuiteRun:
    """Evaluate `rows` (of `suite.table`); `on_start(total, already_done)` once, then `on_row` per row
    (resumed rows first). `resume=False` runs stored rows again (their results are replaced); `traces`:
    where emulated rows are cached (default `traces_dir()`). Raises `RegistryError` when the estimator
    version does not exist."""
    started = time.monotonic()
    resolved = resolve_version(version, warehouse)
    digest = predictor_digest()
    done = stored(warehouse, suite.digest, resolved, digest) if resume else {}
    run = SuiteRun(suite, resolved)
    tasks = []
    for number, values in rows.iterrows():
        previous = done.get(int(number))
        if previous is not None and previous.status != "failed":
            run.results.append(previous)
            continue
        tasks.append(_task(suite, int(number), values, resolved, digest, warehouse, traces or traces_dir(), resume))
    if on_start:
        on_start(len(rows), len(run.results))
    if on_row:
        for result in run.results:
            on_row(result)
    for result in _evaluate_all(tasks, jobs):
        save(result, warehouse)
        run.results.append(result)
        if on_row:
            on_row(result)
    run.results.sort(key=lambda r: r.key.row)
    run.seconds = time.monotonic() - started
    return run


def _task(
    suite: Suite,
    number: int,
    values: pd.Series,
    version: str,
    digest: str,
    warehouse: str | Path | None,
    traces: Path,
    reuse: bool,
) -> _Task:
    kind = importlib.import_module(KINDS[suite.kind])
    try:
        plan = kind.plan(number, values)
        base = RowResult(
            suite.name,
            suite.digest,
            suite.kind,
            plan.key,
            version,
            digest,
            hardware=plan.hardware,
            cluster=plan.cluster,
            details={"row_assumptions": list(plan.assumptions)},
            seq=plan.seq,
        )
    except (ValueError, KeyError, OSError) as e:  # a row the kind cannot run (Transformer Engine's install failed on
        # the disk, too): stored as failed, with the reason
        plan = None
        try:
            measured = kind.measured_s(values)
        except (KeyError, TypeError, ValueError):
            measured = float("nan")
        base = RowResult(
            suite.name,
            suite.digest,
            suite.kind,
            RowKey(number, _fallback_label(values), "?", "?", 0, measured),
            version,
            digest,
            reason=f"cannot run this row: {e}",
        )
    return _Task(base, plan, KINDS[suite.kind], str(warehouse) if warehouse else None, str(traces), reuse)


def _evaluate_all(tasks: list[_Task], jobs: int) -> Iterator[RowResult]:
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield evaluate(task)
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(evaluate, task): task for task in tasks}
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as e:  # noqa: BLE001 - a worker that died: the row failed, the suite goes on
                task = futures[future]
                yield _failed(task.base, f"worker failed: {type(e).__name__}: {e}")


def evaluate(task: _Task) -> RowResult:
    """Emulate (or reuse the cached trace), predict (or reuse a stored prediction of the same trace) and
    compare one row; every failure becomes the row's reason."""
    result = RowResult(**{**task.base.__dict__, "details": dict(task.base.details)})
    if task.plan is None:
        return result
    plan, kind = task.plan, importlib.import_module(task.kind)
    t0 = time.monotonic()
    try:
        _install_te(plan)
        result.command_hash = plan.command_hash()
        run_dir, reused, failure = _trace(plan, Path(task.traces))
    except Exception as e:  # noqa: BLE001 - the emulator's failures are the row's
        result.command_hash = result.command_hash or plan.command_hash()
        return _failed(result, f"emulate: {type(e).__name__}: {e}", traceback.format_exc())
    result.emulate_s, result.trace_reused = time.monotonic() - t0, reused
    if failure is not None:
        status, reason, peak = failure
        result.status, result.reason, result.peak_memory_bytes = status, reason, peak
        result.oom = status == "oom"
        return result
    from maya.core.digest import trace_digest

    t0 = time.monotonic()
    try:
        result.trace_digest = trace_digest(run_dir)
        known = (
            find_prediction(
                task.warehouse,
                result.trace_digest,
                plan.hardware,
                plan.cluster,
                task.base.kind,
                task.base.estimator_version,
                task.base.predictor_digest,
            )
            if task.reuse
            else None
        )
        if known is not None:
            _copy_prediction(known, result)
        else:
            predicted = kind.predict(plan, run_dir, task.base.estimator_version, task.warehouse)
            result.predicted_s, result.band_low_s, result.band_high_s = (
                predicted.predicted_s,
                predicted.band_low_s,
                predicted.band_high_s,
            )
            result.oom, result.oom_reason, result.mfu = predicted.oom, predicted.oom_reason, predicted.mfu
            result.peak_memory_bytes = predicted.peak_memory_bytes
            result.memory_capacity_bytes = predicted.memory_capacity_bytes
            result.details.update(predicted.details)
    except Exception as e:  # noqa: BLE001 - one row the simulator cannot predict does not stop the suite
        return _failed(result, f"predict: {type(e).__name__}: {e}", traceback.format_exc())
    result.predict_s = time.monotonic() - t0
    result.status = "ok"
    result.error_pct = 100.0 * (result.predicted_s / result.key.measured_s - 1.0)
    if result.band_low_s is not None:
        result.in_band = bool(result.band_low_s <= result.key.measured_s <= result.band_high_s)
    return result


def _install_te(plan: RowPlan) -> None:
    """Install Transformer Engine if the row's script imports it (as `MAYA_TE_AUTO` allows), before the row's command
    hash, which digests the installed packages: `maya.api.capture` would install it only after, under a stale key."""
    from maya.emulator.capture_cache import installed_packages
    from maya.installer import transformer_engine

    with contextlib.chdir(plan.workdir or Path.cwd()):
        if transformer_engine.imports_te([str(plan.script), *plan.args]):
            transformer_engine.ensure(f"{plan.script.name}, which imports transformer_engine,")
            installed_packages.cache_clear()  # what it installed is part of the hash


def _trace(plan: RowPlan, root: Path) -> tuple[Path, bool, tuple[str, str, int | None] | None]:
    """The row's emulated run from the capture cache under `root` (`maya.api.capture`, keyed by the row's command
    hash). Returns the run, whether it was reused, and (status, reason, peak bytes) when the emulation did not
    complete."""
    from maya.api import EmulateOptions, capture
    from maya.emulator.capture_cache import CaptureCache

    options = EmulateOptions(
        hardware=plan.hardware,
        nnodes=plan.nnodes,
        nproc_per_node=plan.per_node,
        iterations=plan.iterations or None,
        env=plan.env,
    )
    with contextlib.chdir(plan.workdir or Path.cwd()):
        captured = capture([str(plan.script), *plan.args], options, cache=CaptureCache(root), key=plan.command_hash())
    if captured.ok:
        return captured.run_dir, captured.reused, None
    status = "oom" if captured.status == "oom" else "failed"
    return captured.run_dir, False, (status, captured.reason, captured.peak_bytes)


def _copy_prediction(known: RowResult, result: RowResult) -> None:
    for name in (
        "predicted_s",
        "band_low_s",
        "band_high_s",
        "oom",
        "oom_reason",
        "peak_memory_bytes",
        "memory_capacity_bytes",
        "mfu",
    ):
        setattr(result, name, getattr(known, name))
    result.details.update(
        {k: v for k, v in known.details.items() if k != "row_assumptions"},
        prediction_of_row=f"{known.suite} row {known.key.row}",
    )


def _failed(result: RowResult, reason: str, trace: str | None = None) -> RowResult:
    result.status, result.reason = "failed", reason[-REASON_CHARS:]
    if trace:
        result.details["traceback"] = trace[-4000:]
    return result


def _fallback_label(values: pd.Series) -> str:
    return " ".join(str(v) for v in values.iloc[:4])
