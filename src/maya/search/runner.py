"""The search loop: the algorithm proposes points; each is answered from the log, by a pruning rule,
from the command cache, or evaluated on the executor (predicted from an earlier capture of its command where
only the predictor changed); every answer is logged and told back."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .algorithms import ALGORITHMS, CMAES, Algorithm, Grid, Random
from .evaluate import Evaluator, Task, prediction_hash
from .executors import Executor, LocalExecutor
from .log import SearchLog
from .objective import OBJECTIVES, cost_per_iteration, objective_value
from .outcome import Outcome
from .rules import Rules
from .space import Point, Space

DEFAULT_SHARE = 0.3
"""Default budget of random and CMA-ES searches: this share of the valid points."""


@dataclass
class Record:
    point: Point
    params: dict[str, Any]
    outcome: Outcome
    argv: list[str]
    env: dict[str, str]
    tokens: float | None = None
    cost: float | None = None
    objective: float | None = None
    resumed: bool = False
    """Answered from the log of an earlier run of this search."""


@dataclass
class SearchResult:
    search_id: str
    objective: str
    records: list[Record] = field(default_factory=list)
    valid_points: int = 0

    @property
    def evaluations(self) -> int:
        """Points emulated or simulated by this run."""
        return sum(r.outcome.counts and not r.resumed for r in self.records)

    def ranked(self) -> list[Record]:
        """Points that fit, best first."""
        return sorted((r for r in self.records if r.objective is not None), key=lambda r: r.objective)

    @property
    def best(self) -> Record | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None


def search_id(
    space: Space, algorithm: str, objective: str, seed: int, salt: str, price_per_gpu_hour: float | None
) -> str:
    """Same space, command, algorithm, objective, seed and evaluator settings: the same search."""
    blob = json.dumps([space.digest(), algorithm, objective, seed, salt, price_per_gpu_hour])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def make_algorithm(name: str, space: Space, points: list[Point], *, batch: int = 1, seed: int = 0) -> Algorithm:
    if name == "grid":
        return Grid(points, batch)
    if name == "random":
        return Random(points, batch, seed)
    if name == "cmaes":
        return CMAES(space, points, seed) if len(points) > 1 else Grid(points)
    raise ValueError(f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}")


def _evaluate(job: tuple[Evaluator, Task, Mapping[str, Outcome]]) -> Outcome:
    evaluator, task, known = job
    return evaluator(task, known)


def run_search(
    space: Space,
    evaluator: Evaluator,
    *,
    algorithm: str = "cmaes",
    objective: str = "time",
    budget: int | None = None,
    executor: Executor | None = None,
    log: SearchLog | None = None,
    price_per_gpu_hour: float | None = None,
    seed: int = 0,
    parallel: int = 1,
    on_record: Callable[[Record, SearchResult], None] | None = None,
) -> SearchResult:
    """Search `space` for the configuration with the lowest `objective`, evaluating at most `budget`
    points (default: all for grid, 30% of the valid points otherwise)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    if objective == "tokens-per-dollar" and space.tokens_per_iteration is None:
        raise ValueError("the tokens-per-dollar objective needs `tokens_per_iteration:` in the space")
    rules = Rules(space)
    points = rules.order(space.valid_points())
    if budget is None:
        budget = len(points) if algorithm == "grid" else max(1, math.floor(DEFAULT_SHARE * len(points)))
    salts = getattr(evaluator, "salts", None)
    capture_salt, prediction_salt = (salts.capture, salts.prediction) if salts else ("", "")
    sid = (
        log.search_id
        if log
        else search_id(space, algorithm, objective, seed, salts.search if salts else "", price_per_gpu_hour)
    )
    result = SearchResult(sid, objective, valid_points=len(points))
    logged = log.points() if log else {}
    known: dict[Point, Outcome] = {}
    traces: dict[str, Outcome] = {
        o.trace_hash: o for o in logged.values() if o.trace_hash and o.status in ("ok", "oom")
    }
    executor = executor or LocalExecutor(parallel)
    algo = make_algorithm(algorithm, space, points, batch=parallel, seed=seed)

    def finish(point: Point, outcome: Outcome, resumed: bool = False) -> None:
        argv, env = space.render(point)
        record = Record(point, space.params(point), outcome, argv, env, space.tokens(point), resumed=resumed)
        if outcome.feasible:
            record.cost = cost_per_iteration(outcome.iteration_ns, space.world_size(point), price_per_gpu_hour)
            record.objective = objective_value(objective, outcome.iteration_ns, record.cost, record.tokens)
        known[point] = outcome
        if (
            outcome.trace_hash
            and outcome.status in ("ok", "oom")
            and outcome.source in ("evaluated", "capture-cache", "command-cache")
        ):
            traces[outcome.trace_hash] = outcome
        result.records.append(record)
        if log and not resumed:
            log.record(
                _key(space, point),
                record.params,
                len(result.records),
                outcome,
                command=argv,
                tokens=record.tokens,
                cost=record.cost,
                objective=record.objective,
            )
        if on_record:
            on_record(record, result)

    def flush(tasks: list[tuple[Point, Task]]) -> None:
        by_key = {task.key: point for point, task in tasks}
        jobs = [(evaluator, task, dict(traces)) for _, task in tasks]
        for (_, task, _), outcome in executor.map(_evaluate, jobs):
            outcome.command_hash = outcome.command_hash or task.command_hash(capture_salt)
            outcome.prediction_hash = outcome.prediction_hash or prediction_hash(outcome.command_hash, prediction_salt)
            finish(by_key[task.key], outcome)

    try:
        while (batch := algo.ask()) is not None:
            pending: list[tuple[Point, Task]] = []
            for point in batch:
                if point in known:
                    continue
                if _key(space, point) in logged:
                    finish(point, logged[_key(space, point)], resumed=True)
                    continue
                implied = rules.apply(point, known)
                if implied is not None:
                    finish(point, implied)
                    continue
                task = _task(space, point)
                command_hash = task.command_hash(capture_salt)
                cached = log.emulated(prediction_hash(command_hash, prediction_salt)) if log else None
                earlier = log.captured(command_hash) if log and cached is None else None
                if earlier is not None and earlier.status == "oom" and earlier.trace_hash is None:  # while emulating
                    earlier.prediction_hash, cached = prediction_hash(command_hash, prediction_salt), earlier
                if cached is not None:
                    cached.source = "command-cache"
                    finish(point, cached)
                    continue
                if earlier is not None and earlier.run_dir:
                    task = replace(task, capture=earlier.run_dir)
                if _spent(result) + len(pending) >= budget:
                    break
                pending.append((point, task))
                if len(pending) >= parallel:
                    flush(pending)
                    pending = []
            flush(pending)
            algo.tell([(p, _fitness(result, p)) for p in batch if p in known])
            if _spent(result) >= budget:
                break
    finally:
        executor.close()
    return result


def _spent(result: SearchResult) -> int:
    """Points emulated or simulated by this search, resumed runs included (what `budget` limits)."""
    return sum(r.outcome.counts for r in result.records)


def _fitness(result: SearchResult, point: Point) -> float | None:
    return next((r.objective for r in reversed(result.records) if r.point == point), None)


def _key(space: Space, point: Point) -> str:
    """A point's key in the log: its parameter values as JSON."""
    return json.dumps(space.params(point), sort_keys=True, default=str)


def _task(space: Space, point: Point) -> Task:
    argv, env = space.render(point)
    return Task(_key(space, point), tuple(argv), tuple(sorted(env.items())), space.world_size(point))
