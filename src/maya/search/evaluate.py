"""Evaluating a point for real: capture the rendered command on virtual GPUs (`maya.api.capture`, cached by its
command hash), hash the trace, predict it (unless an identical trace was already predicted)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from maya.core.clusters import UnknownCluster, cluster_file
from maya.core.digest import trace_digest
from maya.core.hardware import DEFAULT_HARDWARE

from .outcome import Outcome

if TYPE_CHECKING:
    from maya.core.estimator_versions import VersionRecord


UNRESOLVED = "unresolved"
"""The script digest of a command whose script cannot be found or read: the command cache cannot see its edits."""


@dataclass(frozen=True)
class Task:
    """One point to evaluate: the command line, its extra environment, the world size and, where the same command
    was captured before under the same capture salt, that complete capture (to predict again, not emulate)."""

    key: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    world_size: int
    capture: str | None = None

    def command_hash(self, salt: str = "") -> str:
        """What keys the point's capture: the command, its environment, the world size and the capture salt."""
        blob = json.dumps([self.argv, self.env, self.world_size, salt])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def prediction_hash(command_hash: str, salt: str) -> str:
    """What keys a logged outcome: the capture's command hash and the prediction salt."""
    return hashlib.sha256(json.dumps([command_hash, salt]).encode()).hexdigest()[:16]


class Evaluator(Protocol):
    def __call__(self, task: Task, known_traces: Mapping[str, Outcome]) -> Outcome: ...


@dataclass(frozen=True)
class Salts:
    """What besides the command line changes a point's result, resolved once per search (`evaluator_salts`), so
    every worker hashes alike."""

    capture: str
    """What changes the trace: hardware, GPUs per node, the script's digest, the emulator's and the installed
    packages' releases (`installed_packages`)."""
    prediction: str
    """What changes the prediction of a trace: durations, the estimator version they resolve to, the cluster and
    its spec file, the host factor and `maya.api.predictor_digest`."""
    estimator_version: str | None
    """The estimator version `auto` or `estimators` resolved to (None: none used or none registered)."""

    @property
    def search(self) -> str:
        """Both salts: part of the search id."""
        return f"{self.capture}|{self.prediction}"


def evaluator_salts(
    hardware: str,
    gpus_per_node: int,
    durations: str,
    cluster: str | None,
    *,
    script: str = "",
    warehouse: str | None = None,
) -> Salts:
    """The salts of a search's points: a capture is reused when the command and the capture salt are equal, a
    logged outcome only when the prediction salt is equal too (else the capture is predicted again). ValueError
    for a host factor that is not one or an unknown cluster; `duckdb.Error` or OSError for a warehouse that cannot
    be read."""
    from maya.api import host_factor, predictor_digest
    from maya.emulator.capture_cache import emulator_digest, installed_packages

    factor, _ = host_factor(hardware, cluster)
    version = estimator_version(durations, warehouse)
    label = f"{version.version}:{version.artifact_sha256[:16]}" if version else ""
    return Salts(
        capture=f"{hardware}/{gpus_per_node}/{script}/{emulator_digest()}/{installed_packages()}",
        prediction=f"{durations}/{label}/{cluster}/{cluster_digest(cluster)}/{factor!r}/{predictor_digest()}",
        estimator_version=version.version if version else None,
    )


def script_digest(command: list[str] | tuple[str, ...]) -> str:
    """Of the script the command runs: its entry file (`SCRIPT ...`, or the module of `-m MODULE ...` found as the
    emulated ranks find it, the working directory first, without importing anything) and the other `.py` files of
    its folder. Modules it imports from elsewhere and its config files are not seen. `UNRESOLVED` when the script
    cannot be found or read."""
    entry = _module_file(command[1]) if command[:1] == ["-m"] and len(command) > 1 else None
    if command and command[0] != "-m":
        entry = Path(command[0])
    if entry is None or not entry.is_file():
        return UNRESOLVED
    from maya.core.digest import files_digest

    files = [entry, *sorted(p for p in entry.parent.glob("*.py") if p != entry)]
    try:
        return files_digest("", [(path, entry.parent) for path in files])
    except OSError:
        return UNRESOLVED


def _module_file(name: str) -> Path | None:
    """The file `python -m name` runs from the working directory (a package's `__main__`), found segment by
    segment with `PathFinder`, so no parent package is imported; None where it is not a file found there."""
    import os
    import sys
    from importlib.machinery import PathFinder

    # the ranks run `python -m maya.emulator.runner`: the working directory first, where this process has its own
    path: list[str] | None = [os.getcwd(), *(sys.path if sys.flags.safe_path else sys.path[1:])]
    spec = None
    parts = name.split(".")
    try:
        for i in range(len(parts)):
            spec = PathFinder.find_spec(".".join(parts[: i + 1]), path)
            if spec is None:
                return None
            path = list(spec.submodule_search_locations or []) or None
            if path is None and i < len(parts) - 1:
                return None
        if spec is not None and spec.submodule_search_locations:
            spec = PathFinder.find_spec(f"{name}.__main__", list(spec.submodule_search_locations))
    except Exception:  # noqa: BLE001 - a path hook's failure leaves the module unresolved, not the search crashed
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.has_location else None


def estimator_version(durations: str, warehouse: str | None) -> VersionRecord | None:
    """The estimator version `durations` prices with: `latest` in `warehouse` for `auto` and `estimators`; None for
    the roofline or measured durations, and where no version is registered (the roofline prices then)."""
    from maya.core import settings
    from maya.core.estimator_versions import UnknownVersion, resolve

    if durations not in ("auto", "estimators"):
        return None
    try:
        return resolve(Path(warehouse) if warehouse else settings.warehouse())
    except UnknownVersion:
        return None


def cluster_digest(cluster: str | None) -> str:
    """Of the named cluster's spec file ("" for none; "unreadable" for a file that cannot be read)."""
    if cluster is None:
        return ""
    try:
        return hashlib.sha256(cluster_file(cluster).read_bytes()).hexdigest()[:16]
    except (OSError, UnknownCluster):
        return "unreadable"


@dataclass(frozen=True)
class MayaEvaluator:
    """emulate + predict, through `maya.api`: captures cached atomically under `<out_dir>/runs/<command hash>`
    (failed ones kept as `<hash>.failed`); a task that names an earlier complete capture of its command is
    predicted from it. `known_traces` maps trace hashes already predicted to their outcomes."""

    out_dir: str
    salts: Salts
    """Resolved once for the search (`evaluator_salts`), with the same settings as below."""
    hardware: str = DEFAULT_HARDWARE
    gpus_per_node: int = 8
    durations: str = "auto"
    cluster: str | None = None
    warehouse: str | None = None
    """Where predictions look up their estimator version (None: the default warehouse)."""

    def __call__(self, task: Task, known_traces: Mapping[str, Outcome]) -> Outcome:
        from maya.api import EmulateOptions, PredictOptions, capture, predict
        from maya.emulator.capture_cache import CaptureCache

        t0 = time.monotonic()
        per_node = min(self.gpus_per_node, task.world_size)
        if task.world_size % per_node:
            return Outcome("failed", reason=f"{task.world_size} GPUs do not fill nodes of {per_node}")
        command_hash = task.command_hash(self.salts.capture)
        hashes = dict(command_hash=command_hash, prediction_hash=prediction_hash(command_hash, self.salts.prediction))
        earlier = CaptureCache(Path(task.capture).parent).lookup(command_hash) if task.capture else None
        if earlier is not None:
            run_dir, source = earlier, "capture-cache"
        else:
            options = EmulateOptions(
                hardware=self.hardware, nnodes=task.world_size // per_node, nproc_per_node=per_node, env=dict(task.env)
            )
            cache = CaptureCache(Path(self.out_dir) / "runs")
            captured = capture(list(task.argv), options, cache=cache, key=command_hash)
            run_dir, source = captured.run_dir, "evaluated"
            if not captured.ok:
                return Outcome(
                    "oom" if captured.status == "oom" else "failed",
                    peak_memory_bytes=captured.peak_bytes,
                    reason=captured.reason,
                    world_size=task.world_size,
                    run_dir=str(run_dir),
                    seconds=time.monotonic() - t0,
                    **hashes,
                )
        base = dict(**hashes, run_dir=str(run_dir), world_size=task.world_size)
        digest = trace_digest(run_dir)
        if digest in known_traces:
            known = known_traces[digest]
            return Outcome(
                known.status,
                known.iteration_ns,
                known.peak_memory_bytes,
                known.mfu,
                known.hfu,
                source="trace-cache",
                reason=known.reason,
                trace_hash=digest,
                seconds=time.monotonic() - t0,
                **base,
            )
        try:
            p = predict(
                run_dir,
                PredictOptions(
                    hardware=self.hardware,
                    durations=self.durations,
                    estimator_version=self.salts.estimator_version or "latest",
                    cluster=self.cluster,
                    warehouse=self.warehouse,
                ),
            )
        except Exception as e:  # noqa: BLE001 - any failure of one point is that point's outcome
            return Outcome("failed", reason=f"predict: {e}", trace_hash=digest, seconds=time.monotonic() - t0, **base)
        return Outcome(
            "oom" if p.oom else "ok",
            p.iteration_ns,
            p.peak_memory_bytes,
            p.mfu,
            p.hfu,
            source=source,
            reason=p.oom_reason,
            trace_hash=digest,
            seconds=time.monotonic() - t0,
            **base,
        )
