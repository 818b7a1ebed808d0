"""Search algorithms over the discrete points of a space, all with the same ask/tell loop: `ask()` gives
the next batch of points (None when done), `tell()` their fitness (lower is better; None for a point
that does not fit, failed or was pruned)."""
from __future__ import annotations

import math
import random
from typing import Protocol, Sequence

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
        chunk = self._points[self._next:self._next + self._batch]
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
    """CMA-ES (the `cmaes` package) on the unit cube, one axis per parameter with more than one value.
    A sample maps to the nearest valid point (its fitness gets the squared distance on top, so the
    distribution is drawn back to valid ground); a point that does not fit gets the worst fitness seen
    plus one. Fitness is the log of the objective. When a run stalls (no new point for `patience`
    generations) the best point's unvisited neighbours are tried, then CMA-ES restarts with twice the
    population (IPOP) until `max_flat_restarts` restarts in a row bring no improvement."""

    def __init__(self, space: Space, points: Sequence[Point], seed: int = 0, patience: int = 3,
                 max_flat_restarts: int = 2):
        self._valid = {tuple(p) for p in points}
        shape = np.array(space.shape)
        self._axes = np.flatnonzero(shape > 1)
        self._scale = (shape[self._axes] - 1).astype(float)
        self._coords = np.array([np.array(p)[self._axes] for p in points], float) / self._scale
        self._points = [tuple(p) for p in points]
        self._rng = np.random.default_rng(seed)
        self._seed, self._patience, self._max_flat = seed, patience, max_flat_restarts
        self._seen: dict[Point, float | None] = {}
        self._best: tuple[float, Point] | None = None
        self._popsize = None
        self._pending: list[tuple[np.ndarray, Point, float]] = []
        self._stalled = self._flat_restarts = 0
        self._best_at_restart: float | None = None
        self._polishing = False
        self._restart()

    def _restart(self) -> None:
        from cmaes import CMA

        dim = len(self._axes)
        if self._popsize is None:
            self._popsize = 4 + int(3 * math.log(max(dim, 1)))
        else:
            self._popsize *= 2
        mean = self._rng.uniform(0.25, 0.75, dim) if self._best is None else self._rng.uniform(0, 1, dim)
        bounds = np.tile([0.0, 1.0], (dim, 1))
        self._cma = CMA(mean=mean, sigma=0.3, bounds=bounds, population_size=self._popsize,
                        seed=int(self._rng.integers(2**31)))
        self._stalled, self._polishing = 0, False

    def _nearest(self, x: np.ndarray) -> tuple[Point, float]:
        d2 = ((self._coords - x) ** 2).sum(axis=1)
        i = int(d2.argmin())
        return self._points[i], float(d2[i])

    def _neighbours(self, point: Point) -> list[Point]:
        out = []
        for axis in self._axes:
            for step in (-1, 1):
                q = point[:axis] + (point[axis] + step,) + point[axis + 1:]
                if q in self._valid and q not in self._seen:
                    out.append(q)
        return out

    def ask(self) -> list[Point] | None:
        if len(self._seen) >= len(self._valid):
            return None
        if self._polishing:
            around = self._neighbours(self._best[1]) if self._best else []
            if around:
                return around
            if self._best_at_restart is not None and self._best and self._best[0] >= self._best_at_restart:
                self._flat_restarts += 1
                if self._flat_restarts > self._max_flat:
                    return None
            else:
                self._flat_restarts = 0
            self._best_at_restart = self._best[0] if self._best else None
            self._restart()
        self._pending = []
        for _ in range(self._cma.population_size):
            x = self._cma.ask()
            point, d2 = self._nearest(x)
            self._pending.append((x, point, d2))
        return list(dict.fromkeys(p for _, p, _ in self._pending))

    def tell(self, results: Sequence[tuple[Point, float | None]]) -> None:
        new = False
        for point, value in results:
            new |= point not in self._seen
            fitness = None if value is None or value <= 0 else math.log(value)
            self._seen[point] = fitness
            if fitness is not None and (self._best is None or fitness < self._best[0]):
                self._best = (fitness, point)
        if self._polishing or not self._pending:
            return
        finite = [f for f in self._seen.values() if f is not None]
        penalty = (max(finite) + 1.0) if finite else 1.0
        self._cma.tell([(x, (self._seen[p] if self._seen[p] is not None else penalty) + d2)
                        for x, p, d2 in self._pending])
        self._pending = []
        self._stalled = 0 if new else self._stalled + 1
        if self._stalled >= self._patience or self._cma.should_stop():
            self._polishing = True
