"""Search algorithms over the discrete points of a space, all with the same ask/tell loop: `ask()` gives
the next batch of points (None when done), `tell()` their fitness (lower is better; None for a point
that does not fit, failed or was pruned)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .space import Point, Space

ALGORITHMS = ("grid", "random", "cmaes")


class Algorithm(Protocol):
    def ask(self) -> list[Point] | None: ...

    def tell(self, results: Sequence[tuple[Point, float | None]]) -> None: ...


class Grid:
    """Every valid point, in the given order."""

    def __init__(self, points: Sequence[Point], batch: int = 1):
        self._points, self._batch, self._next = list(points), batch, 0

    def ask(self) -> list[Point] | None:
        chunk = self._points[self._next : self._next + self._batch]
        self._next += len(chunk)
        return chunk or None

    def tell(self, results: Sequence[tuple[Point, float | None]]) -> None:
        pass


class Random(Grid):
    """Valid points in a seeded random order."""

    def __init__(self, points: Sequence[Point], batch: int = 1, seed: int = 0):
        shuffled = list(points)
        random.Random(seed).shuffle(shuffled)
        super().__init__(shuffled, batch)


class CMAES:
    """CMA-ES (the `cmaes` package) on the unit cube, one axis per parameter with more than one value,
    with local refinement and restarts.

    A sample maps to the nearest valid point (its fitness gets the squared distance on top, so the
    distribution is drawn back to valid ground); a point that does not fit gets the worst fitness seen
    plus one. Fitness is the log of the objective. When a run stalls (no new point for `patience`
    generations) the incumbent is refined by steepest descent over its neighbours (every other value of
    one parameter; once those are seen, one step in each of two parameters) until none is better, then
    CMA-ES restarts, alternately around the incumbent (small step) and from a random mean with twice the
    last global population (BIPOP-style), until `max_flat_restarts` restarts in a row bring no
    improvement or every valid point was seen."""

    def __init__(
        self, space: Space, points: Sequence[Point], seed: int = 0, patience: int = 3, max_flat_restarts: int = 4
    ):
        self._valid = {tuple(p) for p in points}
        self._shape = np.array(space.shape)
        self._axes = np.flatnonzero(self._shape > 1)
        self._scale = (self._shape[self._axes] - 1).astype(float)
        self._coords = np.array([np.array(p)[self._axes] for p in points], float) / self._scale
        self._points = [tuple(p) for p in points]
        self._rng = np.random.default_rng(seed)
        self._patience, self._max_flat = patience, max_flat_restarts
        self._seen: dict[Point, float | None] = {}
        self._best: tuple[float, Point] | None = None
        self._local_popsize = self._global_popsize = 4 + int(3 * math.log(max(len(self._axes), 1)))
        self._restarts = self._flat_restarts = self._stalled = 0
        self._best_at_restart: float | None = None
        self._pending: list[tuple[np.ndarray, Point, float]] = []
        self._refining = False
        self._start(self._rng.uniform(0.25, 0.75, len(self._axes)), 0.3, self._global_popsize)

    def _start(self, mean: np.ndarray, sigma: float, popsize: int) -> None:
        from cmaes import CMA

        self._cma = CMA(
            mean=mean,
            sigma=sigma,
            bounds=np.tile([0.0, 1.0], (len(self._axes), 1)),
            population_size=popsize,
            seed=int(self._rng.integers(2**31)),
        )
        self._stalled, self._refining = 0, False

    def _restart(self) -> bool:
        """A new CMA-ES run once a refinement ended; False when the search should stop."""
        best = self._best[0] if self._best else None
        flat = best is None or (self._best_at_restart is not None and best >= self._best_at_restart)
        self._flat_restarts = self._flat_restarts + 1 if flat else 0
        if self._flat_restarts > self._max_flat:
            return False
        self._best_at_restart = best
        self._restarts += 1
        if self._best is not None and self._restarts % 2:
            self._start(np.array(self._best[1], float)[self._axes] / self._scale, 0.15, self._local_popsize)
        else:
            self._global_popsize *= 2
            self._start(self._rng.uniform(0, 1, len(self._axes)), 0.3, self._global_popsize)
        return True

    def _nearest(self, x: np.ndarray) -> tuple[Point, float]:
        d2 = ((self._coords - x) ** 2).sum(axis=1)
        i = int(d2.argmin())
        return self._points[i], float(d2[i])

    def _neighbours(self, point: Point, order: int) -> list[Point]:
        """Valid points not yet seen that differ from `point` in one parameter (`order` 1: any other
        value, nearest first) or in two (`order` 2: one step each)."""
        if order == 1:
            moves = [
                (abs(v - point[a]), _moved(point, {a: v}))
                for a in self._axes
                for v in range(self._shape[a])
                if v != point[a]
            ]
        else:
            moves = [
                (2, _moved(point, {a: point[a] + da, b: point[b] + db}))
                for i, a in enumerate(self._axes)
                for b in self._axes[i + 1 :]
                for da in (-1, 1)
                for db in (-1, 1)
            ]
        return [q for _, q in sorted(moves) if q in self._valid and q not in self._seen]

    def ask(self) -> list[Point] | None:
        while len(self._seen) < len(self._valid):
            if not self._refining:
                self._pending = []
                for _ in range(self._cma.population_size):
                    x = self._cma.ask()
                    self._pending.append((x, *self._nearest(x)))
                return list(dict.fromkeys(p for _, p, _ in self._pending))
            best = self._best[1] if self._best else None
            moves = (self._neighbours(best, 1) or self._neighbours(best, 2)) if best else []
            if moves:
                return moves
            if not self._restart():
                return None
        return None

    def tell(self, results: Sequence[tuple[Point, float | None]]) -> None:
        new = False
        for point, value in results:
            new |= point not in self._seen
            fitness = None if value is None or value <= 0 else math.log(value)
            self._seen[point] = fitness
            if fitness is not None and (self._best is None or fitness < self._best[0]):
                self._best = (fitness, point)
        if self._refining or not self._pending:
            return
        pending, self._pending = self._pending, []
        if any(p not in self._seen for _, p, _ in pending):
            return  # the budget ran out inside this generation
        finite = [f for f in self._seen.values() if f is not None]
        penalty = (max(finite) + 1.0) if finite else 1.0
        self._cma.tell([(x, (self._seen[p] if self._seen[p] is not None else penalty) + d2) for x, p, d2 in pending])
        self._stalled = 0 if new else self._stalled + 1
        if self._stalled >= self._patience or self._cma.should_stop():
            self._refining = True


def _moved(point: Point, changes: dict[int, int]) -> Point:
    return tuple(changes.get(axis, value) for axis, value in enumerate(point))
