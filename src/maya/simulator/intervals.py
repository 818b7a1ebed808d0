"""Unions of time intervals and how much of a window they cover (vectorised)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Union:
    """Disjoint, sorted intervals with the cumulative covered length before each."""

    starts: np.ndarray
    ends: np.ndarray
    before: np.ndarray

    @classmethod
    def of(cls, starts: np.ndarray, ends: np.ndarray) -> Union:
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
        if len(starts) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])
        new = np.ones(len(starts), dtype=bool)
        new[1:] = starts[1:] > ends[:-1]
        group = np.cumsum(new) - 1
        merged_starts = starts[new]
        merged_ends = np.zeros(len(merged_starts), dtype=ends.dtype)
        np.maximum.at(merged_ends, group, ends)
        lengths = merged_ends - merged_starts
        return cls(merged_starts, merged_ends, np.concatenate([[0], np.cumsum(lengths)[:-1]]))

    def covered_until(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t] for each t."""
        t = np.asarray(t, dtype=np.int64)
        if len(self.starts) == 0:
            return np.zeros_like(t)
        i = np.searchsorted(self.starts, t, side="right") - 1
        j = np.maximum(i, 0)
        partial = np.clip(t - self.starts[j], 0, self.ends[j] - self.starts[j])
        return np.where(i >= 0, self.before[j] + partial, 0)

    def covered(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covered length within each window [a, b]."""
        return self.covered_until(b) - self.covered_until(a)


def union(*parts: tuple[np.ndarray, np.ndarray]) -> Union:
    return Union.of(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
