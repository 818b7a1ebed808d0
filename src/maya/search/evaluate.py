"""Evaluating a point for real: emulate the rendered command on virtual GPUs, hash the trace, predict it
(unless an identical trace was already predicted)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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


@dataclass(frozen=True)
class MayaEvaluator:
    """emulate + predict. `known_traces` maps trace hashes already predicted to their outcomes."""

    out_dir: str
    hardware: str = DEFAULT_HARDWARE
    gpus_per_node: int = 8
    durations: str = "auto"
    cluster: str | None = None

    @property
    def salt(self) -> str:
        """What besides the command changes a result."""
        return f"{self.hardware}/{self.gpus_per_node}/{self.durations}/{self.cluster}"

    def __call__(self, task: Task, known_traces: Mapping[str, Outcome]) -> Outcome:
        from maya.emulator.launcher import Topology, emulate
        from maya.simulator.predict import predict

        t0 = time.monotonic()
        per_node = min(self.gpus_per_node, task.world_size)
        if task.world_size % per_node:
            return Outcome("failed", reason=f"{task.world_size} GPUs do not fill nodes of {per_node}")
        command_hash = task.command_hash(self.salt)
        run_dir = Path(self.out_dir) / "runs" / command_hash
        saved = {k: os.environ.get(k) for k, _ in task.env}
        os.environ.update(dict(task.env))
        try:
            if run_dir.exists():
                shutil.rmtree(run_dir)  # a capture interrupted before it was logged
            result = emulate(
                list(task.argv),
                run_dir,
                hardware=self.hardware,
                topology=Topology(task.world_size // per_node, per_node),
            )
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        base = dict(command_hash=command_hash, run_dir=str(run_dir), world_size=task.world_size)
        if result.status != "complete":
            peak = max((r.peak_bytes for r in result.ranks), default=None)
            error = next((r.error for r in result.ranks if r.error), None) or "the script failed"
            reason = "out of memory while emulating" if result.status == "oom" else error.strip().splitlines()[-1]
            return Outcome(
                "oom" if result.status == "oom" else "failed",
                peak_memory_bytes=peak,
                reason=reason,
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
                source="trace-cache",
                reason=known.reason,
                trace_hash=digest,
                seconds=time.monotonic() - t0,
                **base,
            )
        try:
            p, _ = predict(run_dir, hardware=self.hardware, durations=self.durations, cluster=self.cluster, store=False)
        except Exception as e:  # noqa: BLE001 - any failure of one point is that point's outcome
            return Outcome("failed", reason=f"predict: {e}", trace_hash=digest, seconds=time.monotonic() - t0, **base)
        return Outcome(
            "oom" if p.oom else "ok",
            p.iteration_ns,
            p.peak_memory_bytes,
            p.mfu,
            reason=p.oom_reason,
            trace_hash=digest,
            seconds=time.monotonic() - t0,
            **base,
        )
