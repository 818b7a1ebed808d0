"""Evaluating a point for real: capture the rendered command on virtual GPUs (`maya.api.capture`, cached by its
command hash), hash the trace, predict it (unless an identical trace was already predicted)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from maya.core.clusters import UnknownCluster, cluster_file
from maya.core.digest import trace_digest
from maya.core.hardware import DEFAULT_HARDWARE

from .outcome import Outcome


@dataclass(frozen=True)
class Task:
    """One point to evaluate: the command line, its extra environment and the world size."""

    key: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    world_size: int

    def command_hash(self, salt: str = "") -> str:
        blob = json.dumps([self.argv, self.env, self.world_size, salt])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Evaluator(Protocol):
    def __call__(self, task: Task, known_traces: Mapping[str, Outcome]) -> Outcome: ...


def evaluator_salt(
    hardware: str,
    gpus_per_node: int,
    durations: str,
    cluster: str | None,
    *,
    script: str = "",
    warehouse: str | None = None,
) -> str:
    """What besides the command line changes a point's result (part of its command hash and the search id): the
    settings, the contents of the cluster's spec file and the host factor they resolve to (`maya.api.host_factor`),
    the script's contents (`script_digest`), the emulator's source and the estimator version `durations` resolve to
    in `warehouse`, so a search after an edit of any of them evaluates afresh. ValueError for a host factor that is
    not one or an unknown cluster."""
    from maya.api import host_factor
    from maya.emulator.capture_cache import emulator_digest

    factor, _ = host_factor(hardware, cluster)
    return (
        f"{hardware}/{gpus_per_node}/{durations}/{cluster}/{cluster_digest(cluster)}/{factor!r}/{script}/"
        f"{emulator_digest()}/{estimators_digest(durations, warehouse)}"
    )


def script_digest(command: list[str] | tuple[str, ...]) -> str:
    """Of the file the command runs (`SCRIPT ...`, or the module of `-m MODULE ...` where it resolves to a file);
    "" when there is none to read."""
    import importlib.util

    path: str | None = command[0] if command else None
    if command and command[0] == "-m":
        try:
            spec = importlib.util.find_spec(command[1]) if len(command) > 1 else None
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None else None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else ""
    except OSError:
        return ""


def estimators_digest(durations: str, warehouse: str | None) -> str:
    """The estimator version `durations` prices with (its name and artifact digest; "" for the roofline or
    measured durations, and where no version is registered: the roofline prices then)."""
    import duckdb

    from maya.core import settings
    from maya.core.estimator_versions import UnknownVersion, resolve

    if durations not in ("auto", "estimators"):
        return ""
    try:
        record = resolve(Path(warehouse) if warehouse else settings.warehouse())
    except (UnknownVersion, duckdb.Error, OSError):
        return ""
    return f"{record.version}:{record.artifact_sha256[:16]}"


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
    (failed ones kept as `<hash>.failed`). `known_traces` maps trace hashes already predicted to their
    outcomes."""

    out_dir: str
    hardware: str = DEFAULT_HARDWARE
    gpus_per_node: int = 8
    durations: str = "auto"
    cluster: str | None = None
    warehouse: str | None = None
    """Where predictions look up their estimator version (None: the default warehouse)."""
    script: str = ""
    """The digest of the script the points run (`script_digest`)."""

    @property
    def salt(self) -> str:
        """What besides the command changes a result."""
        return evaluator_salt(
            self.hardware,
            self.gpus_per_node,
            self.durations,
            self.cluster,
            script=self.script,
            warehouse=self.warehouse,
        )

    def __call__(self, task: Task, known_traces: Mapping[str, Outcome]) -> Outcome:
        from maya.api import EmulateOptions, PredictOptions, capture, predict
        from maya.emulator.capture_cache import CaptureCache

        t0 = time.monotonic()
        per_node = min(self.gpus_per_node, task.world_size)
        if task.world_size % per_node:
            return Outcome("failed", reason=f"{task.world_size} GPUs do not fill nodes of {per_node}")
        command_hash = task.command_hash(self.salt)
        options = EmulateOptions(
            hardware=self.hardware, nnodes=task.world_size // per_node, nproc_per_node=per_node, env=dict(task.env)
        )
        captured = capture(list(task.argv), options, cache=CaptureCache(Path(self.out_dir) / "runs"), key=command_hash)
        run_dir = captured.run_dir
        base = dict(command_hash=command_hash, run_dir=str(run_dir), world_size=task.world_size)
        if not captured.ok:
            return Outcome(
                "oom" if captured.status == "oom" else "failed",
                peak_memory_bytes=captured.peak_bytes,
                reason=captured.reason,
                seconds=time.monotonic() - t0,
                **base,
            )
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
                    hardware=self.hardware, durations=self.durations, cluster=self.cluster, warehouse=self.warehouse
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
            reason=p.oom_reason,
            trace_hash=digest,
            seconds=time.monotonic() - t0,
            **base,
        )
