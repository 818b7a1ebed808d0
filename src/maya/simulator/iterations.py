"""Where each training iteration starts in a rank's calls, and which iterations are steady state.

Sources, first that applies: the ops' `iteration` column (emulator, Kineto import); `ProfilerStep#N`
op spans; otherwise the longest run of a repeated call sequence that does device work (benchmark loops
without an optimizer; not host-only queries, as torch 2.6's NVML device counts before CUDA starts), its
boundaries moved to just after a host synchronisation where the repeated unit has one; else the whole trace
is one iteration. The first iteration (it holds initialisation), a short trailing one (teardown, or a run
stopped mid-step) unless it ends a step (an optimizer-phase call after its last backward call: a whole step, and
the longer one before it did extra work), those holding an evaluation pass (ops of phase `eval`: a validation
every k steps) and those with many more device calls than the leanest of the others (work that only adds calls:
a function compiled lazily at its first call, autotuning benchmarks, a checkpoint save) are not steady.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .opcodes import DEVICE_OPS, HOST_SYNC_OPS

if TYPE_CHECKING:
    from .trace import RankTrace

PARTIAL_SHARE = 0.5
"""A last iteration with fewer device calls than this share of the median is a partial one."""
EXTRA_WORK_SHARE = 1.25
"""An iteration with more device calls than this multiple of the leanest candidate's does extra work."""
SIGNATURE_COLUMNS = (
    "api",
    "stream_id",
    "kernel_id",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "bytes",
    "collective_name",
    "in_msg_nelems",
)
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Iterations:
    bounds: np.ndarray
    """Start call of every iteration, then the number of calls (strictly increasing)."""
    steady: np.ndarray
    """Indices of the steady-state iterations."""
    source: str

    @property
    def count(self) -> int:
        return len(self.bounds) - 1


def detect(trace: RankTrace, opcodes: np.ndarray) -> Iterations:
    n = len(opcodes)
    for source, labels_of in (("ops", call_iterations), ("profiler-step", _from_profiler_steps)):
        labels = labels_of(trace)
        if labels is not None and len(labels) and labels[0] != labels[-1]:
            bounds = np.concatenate([[0], np.flatnonzero(np.diff(labels)) + 1, [n]])
            backward, optimizer = in_phase(trace, "backward"), in_phase(trace, "optimizer")
            return _steady(bounds, opcodes, source, evaluating(trace), backward, optimizer)
    found = _from_repetition(trace, opcodes)
    if found is not None:
        return found
    return Iterations(np.array([0, n]), np.array([0]), "whole")


def _monotone(labels: pd.Series) -> np.ndarray:
    filled = labels.ffill().bfill().fillna(0).to_numpy(dtype="float64")
    return np.maximum.accumulate(filled)


def call_iterations(trace: RankTrace) -> np.ndarray | None:
    """Per call, the iteration of its op (the ops' `iteration` column), carried over calls without an op and
    never decreasing; None when the ops hold no iteration."""
    ops = trace.ops
    if not len(ops) or ops["iteration"].isna().all() or trace.calls["op_id"].isna().all():
        return None
    first, where = trace.call_ops()
    iteration = ops["iteration"].to_numpy(dtype="float64", na_value=np.nan)[first]
    return _monotone(pd.Series(np.where(where >= 0, iteration[np.maximum(where, 0)], np.nan)))


def evaluating(trace: RankTrace) -> np.ndarray:
    """Per call, whether it belongs to an evaluation pass (its op's phase is `eval`)."""
    return in_phase(trace, "eval")


def in_phase(trace: RankTrace, phase: str) -> np.ndarray:
    """Per call, whether its op's phase is `phase`."""
    ops = trace.ops
    if not len(ops) or "phase" not in ops or not (ops["phase"] == phase).any():
        return np.zeros(len(trace.calls), dtype=bool)
    first, where = trace.call_ops()
    inside = ops["phase"].eq(phase).fillna(False).to_numpy(dtype=bool)[first]  # per op, by position; NA: not
    return np.where(where >= 0, inside[np.maximum(where, 0)], False)


def _from_profiler_steps(trace: RankTrace) -> np.ndarray | None:
    ops = trace.ops
    if not len(ops):
        return None
    step = ops["name"].astype(str).str.extract(_STEP_RE, expand=False)
    steps = ops.loc[step.notna()].assign(step=step.dropna().astype(int)).sort_values("start_ns")
    if steps.empty:
        return None
    start = trace.calls["start_ns"].to_numpy()
    i = np.searchsorted(steps["start_ns"].to_numpy(), start, side="right") - 1
    inside = (i >= 0) & (start <= steps["end_ns"].to_numpy(dtype="float64", na_value=np.inf)[np.maximum(i, 0)])
    return _monotone(pd.Series(np.where(inside, steps["step"].to_numpy()[np.maximum(i, 0)], np.nan)))


def _steady(
    bounds: np.ndarray,
    opcodes: np.ndarray,
    source: str,
    evaluating: np.ndarray | None = None,
    backward: np.ndarray | None = None,
    optimizer: np.ndarray | None = None,
) -> Iterations:
    """The steady iterations; `evaluating`, `backward` and `optimizer` say per call whether its op is in an evaluation
    pass, in a backward or in the optimizer phase (None, or none at all: not known)."""
    count = len(bounds) - 1
    if count == 1:
        return Iterations(bounds, np.array([0]), source)
    device = np.add.reduceat(np.isin(opcodes, DEVICE_OPS).astype(np.int64), bounds[:-1])
    steady = list(range(1, count))
    # a partial last iteration is dropped first: left alone after the evaluating ones, it would be taken for
    # the steady state (a run stopped just after a validation pass). One that ends a step is whole: the iteration
    # before it did extra work (OLMo-core's trainer runs a forward and backward on its first batch before its first
    # step: with --iterations 3 that iteration, twice the work, was the only steady one)
    whole = _ends_a_step(bounds[steady[-1]], bounds[steady[-1] + 1], backward, optimizer)
    if len(steady) > 1 and not whole and device[steady[-1]] < PARTIAL_SHARE * np.median(device[steady[:-1]]):
        steady.pop()
    if evaluating is not None and evaluating.any():
        training = [k for k in steady if not evaluating[bounds[k] : bounds[k + 1]].any()]
        steady = training or steady
    if len(steady) > 1:
        leanest = device[steady].min()
        steady = [k for k in steady if device[k] <= EXTRA_WORK_SHARE * leanest]
    return Iterations(bounds, np.array(steady or [count - 1]), source)


def _ends_a_step(start: int, end: int, backward: np.ndarray | None, optimizer: np.ndarray | None) -> bool:
    """Whether calls `start:end` end a training step: an optimizer-phase call after their last backward call (an
    optimizer step's ops carry the label of the iteration they close; `zero_grad`, also of that phase, comes before
    the backward). False without a backward, or when the trace has no optimizer-phase call at all (not known: a run
    stopped mid-backward, or a forward and backward with no step after it, is a partial iteration)."""
    if backward is None or optimizer is None or not optimizer.any():
        return False
    inside = np.flatnonzero(backward[start:end])
    return bool(len(inside) and optimizer[start + inside[-1] + 1 : end].any())


def call_signatures(calls: pd.DataFrame) -> np.ndarray:
    """A hash per call of what identifies it across iterations (API, stream, kernel, shapes, sizes)."""
    return pd.util.hash_pandas_object(calls[list(SIGNATURE_COLUMNS)], index=False).to_numpy()


def find_period(
    values: np.ndarray, max_candidates: int = 64, rare_values: int = 16, eligible: np.ndarray | None = None
) -> tuple[int, int, int] | None:
    """(start, period, repetitions) of the longest exactly repeated run of `values`, at least two
    repetitions; None if nothing repeats. Candidate periods are the gaps between occurrences of the
    rarest repeated values (a call made once per iteration repeats at the iteration's length), the
    most frequent gaps first. With `eligible` (a mask over `values`), only a run whose repeated unit holds
    an eligible value counts (an iteration does device work: a repeated host-only query is none)."""
    n = len(values)
    counted = np.concatenate([[0], np.cumsum(eligible, dtype=np.int64)]) if eligible is not None else None
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    repeated = np.flatnonzero(counts >= 2)
    if not len(repeated):
        return None
    rare = repeated[np.argsort(counts[repeated], kind="stable")[:rare_values]]
    gaps: Counter[int] = Counter()
    for u in rare:
        gaps.update(np.diff(np.flatnonzero(inverse == u)).tolist())
    best: tuple[int, int, int] | None = None
    best_cover = 0
    for p, _ in gaps.most_common(max_candidates):
        if p <= 0 or 2 * p > n:
            continue
        equal = np.concatenate([[False], values[:-p] == values[p:], [False]])
        edges = np.flatnonzero(np.diff(equal.astype(np.int8)))
        runs = edges.reshape(-1, 2)
        if not len(runs):
            continue
        lengths = runs[:, 1] - runs[:, 0]
        if counted is not None:  # a run's unit is values[start:start + p]
            lengths = np.where(counted[runs[:, 0] + p] > counted[runs[:, 0]], lengths, -1)
        k = int(np.argmax(lengths))
        reps = (int(lengths[k]) + p) // p
        if reps >= 2 and (reps * p > best_cover or (reps * p == best_cover and p < best[1])):
            best, best_cover = (int(runs[k, 0]), p, reps), reps * p
    return best


def _from_repetition(trace: RankTrace, opcodes: np.ndarray) -> Iterations | None:
    n = len(opcodes)
    found = find_period(call_signatures(trace.calls), eligible=np.isin(opcodes, DEVICE_OPS))
    if found is None:
        return None
    start, period, reps = found
    after_sync = np.flatnonzero(np.isin(opcodes[start : start + period], HOST_SYNC_OPS)) + 1
    shift = int(after_sync[0]) % period if len(after_sync) else 0
    cuts = list(range(start + shift, start + reps * period + 1, period))
    bounds = np.unique(np.array([0, *cuts, n]))
    init = 1 if cuts[0] > 0 else 0  # an initialisation region before the first repetition
    repeated = [k for k in range(init, len(bounds) - 1) if bounds[k + 1] - bounds[k] == period]
    steady = repeated[1:] if not init and len(repeated) > 1 else repeated
    return Iterations(bounds, np.array(steady), "repetition")
