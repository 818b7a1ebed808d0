"""Framework host time: what the script's own host code (Python, ATen dispatch, autograd, hooks, optimizer loops)
spends between two device-API calls, read from an emulated trace.

The emulator answers every call at once, so the host time between two calls on a thread that issues device work
is the framework's, measured on the emulating CPU, plus what Maya's recording adds there: the op observer's
callbacks (every recorded op), the module hooks (every `nn.Module: ` range) and the description of each Triton
launch. Those are measured per record (`benchmarks/host_overhead.py`, in thread CPU time: the same loop run
plainly and under `maya emulate`) and taken off each gap. The stubs' own cost is inside each call's duration,
never in a gap (the records' `duration_ns`: 20–50 ns a call, about 1 us more since each reads the thread's CPU
clock, a system call); a CUDA graph launch writes its replayed rows after it returns, so a gap starts at the last row
written.

Where a rank's calls carry the issuing thread's CPU clock (spec 1.7: `cpu_start_ns`, `cpu_duration_ns`), a call's
framework time is that thread's CPU time since its previous call ended, less the recording costs recorded on that
thread meanwhile. Other processes' time slices are not in it, nor a thread's sleep or wait for another (the
autograd thread's wake-up at `loss.backward()`, the main thread's when it hands back). A loaded CPU still runs the
thread slower (cold caches after other processes ran, a busy sibling core), and that only ever adds to a call's CPU
time: after the first iteration each call's framework time is the shortest of the same call over the iterations (the
k-th call of one API under one op name on one thread, per iteration). Nothing is capped: a long gap before a call of a
common kind in every iteration (data loading before a copy) is the script's own.

Traces without the clock (spec 1.6 and older, or a rank whose calls lack it) are read from wall gaps, as before:
the gap from the end of the previous call on any issuing thread. Preemption only ever lengthens a wall gap, so the
same shortest over iterations is taken, and at most `OUTLIER_FACTOR` times the median of its API under its op on its
thread. A wall gap also holds a thread handoff's wake-up, recurring in every iteration, which neither rule removes.

The simulator adds the result, scaled by the target host's factor (`host_factor`), to each emulated call's host time
(`emulated`) when the provider does not replay measured host times. A measured call (a profiler or Kineto trace,
`time_source` `measured`) gets none, whatever prices it: its gaps were timed on the GPU's own host, and its
provider's host times (the roofline's, the estimators') already stand for that host's framework.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from maya_trace_spec.vocabulary import MODULE_RANGE_PREFIX

from ..distinct import contains
from ..iterations import Iterations
from ..opcodes import DEVICE_OPS

OBSERVER_OP_NS = 3_000.0
"""Host time the op observer adds per recorded op (RecordFunction with its inputs, the callbacks, host-value
tracking): eager `add_` +3.2 us, `mm` +1.7 us, an autograd step +3.9 us a record (`benchmarks/host_overhead.py`
on the 2-core AMD EPYC (Zen 4) VM that emulates here)."""
MODULE_HOOK_NS = 4_200.0
"""Host time a module's forward hooks add (the `nn.Module: ` range opened and closed through ctypes), measured as
`OBSERVER_OP_NS`; the range itself is one of the recorded ops, so this replaces that op's cost."""
TRITON_NOTE_NS = 2_100.0
"""Host time describing one Triton launch adds (`emulator.triton_launches.LaunchNotes.launch`, six arguments)."""
TRITON_NOTE_KEY = '"triton"'
"""What a described Triton launch's `args` JSON holds."""
OUTLIER_FACTOR = 3.0
"""A call's gap longer than this many times the median of its API under its op on its thread (in every iteration
after the first) was preempted there: it is cut to that."""


def emulated(calls: pd.DataFrame, run_source: str | None = None) -> np.ndarray:
    """Which calls the emulator timed: `time_source` `emulated`; where a call states none, whether the run's
    `source` is the emulator."""
    run = run_source == "emulator"
    if "time_source" not in calls:
        return np.full(len(calls), run)
    source = calls["time_source"]
    return ((source == "emulated") | (source.isna() & run)).to_numpy(dtype=bool)


def emulation_overhead_ns(ops: int | np.ndarray, modules: int | np.ndarray, triton: int | np.ndarray) -> np.ndarray:
    """Host time Maya's recording spends in a gap holding `ops` recorded ops (`modules` of them module ranges) and
    `triton` described Triton launches."""
    ops, modules, triton = (np.asarray(x, dtype="float64") for x in (ops, modules, triton))
    return (ops - modules) * OBSERVER_OP_NS + modules * MODULE_HOOK_NS + triton * TRITON_NOTE_NS


def framework_ns(
    calls: pd.DataFrame, ops: pd.DataFrame, opcodes: np.ndarray, iterations: Iterations | None
) -> np.ndarray:
    """Framework host time before every call of one emulated rank, on the emulating CPU (ns; 0 on calls of threads
    that issue no device work, such as NCCL's watchdog, and on device rows). `calls` are the rank's api_calls in
    `seq` order, `ops` its ops, `opcodes` the calls' opcodes and `iterations` the training iterations the simulator
    found in them (None: each gap stands alone). The first of several iterations gets none: its host time is
    compilation, autotuning and lazy set-up, much of it the emulator's, and what it costs differs from rank to
    rank (replayed, it would offset their steady iterations)."""
    out = np.zeros(len(calls))
    host = (calls["domain"] != "device").to_numpy()
    thread = calls["thread_id"].fillna(-1).to_numpy(dtype="int64")
    rows = issuing_rows(calls, opcodes)
    issuing = np.zeros(len(calls), bool)
    issuing[rows] = True
    if len(rows) < 2:
        return out
    # a graph launch's replayed rows were written after it returned: the gap starts at the last one written
    marks = np.flatnonzero(issuing | (~host & np.isin(thread, thread[rows])))
    cpu = has_cpu_clock(calls, rows)
    gap = (
        _cpu_gaps(calls, ops, rows, marks, issuing, host) if cpu else _wall_gaps(calls, ops, rows, marks, issuing, host)
    )
    gap = np.maximum(gap, 0.0)
    if iterations is not None and iterations.count > 1:
        labels = np.repeat(np.arange(iterations.count), np.diff(iterations.bounds))[rows]
        later = labels > 0
        gap[later] = _robust(calls.iloc[rows[later]], ops, gap[later], labels[later], cpu)
        gap[~later] = 0.0
    out[rows] = gap
    return out


def issuing_rows(calls: pd.DataFrame, opcodes: np.ndarray) -> np.ndarray:
    """Rows of the host calls made on threads that issue device work (the calls framework time is read before)."""
    host = (calls["domain"] != "device").to_numpy()
    thread = calls["thread_id"].fillna(-1).to_numpy(dtype="int64")
    return np.flatnonzero(host & np.isin(thread, np.unique(thread[np.isin(opcodes, DEVICE_OPS) & host])))


def has_cpu_clock(calls: pd.DataFrame, rows: np.ndarray | None = None) -> bool:
    """Whether every call in `rows` (all: None) carries its thread's CPU clock (`cpu_start_ns`, spec 1.7)."""
    if "cpu_start_ns" not in calls or "cpu_duration_ns" not in calls:
        return False
    chosen = calls if rows is None else calls.iloc[rows]
    return bool(len(chosen)) and bool(chosen["cpu_start_ns"].notna().all() and chosen["cpu_duration_ns"].notna().all())


def _host_ends(calls: pd.DataFrame, marks: np.ndarray, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The wall start and end of each of `marks` (a device row ends where it starts)."""
    start = calls["start_ns"].to_numpy(dtype="int64")[marks]
    duration = calls["duration_ns"].to_numpy(dtype="float64", na_value=0.0)[marks]
    return start, start + np.where(host[marks], duration, 0).astype("int64")


def _wall_gaps(
    calls: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, marks: np.ndarray, issuing: np.ndarray, host: np.ndarray
) -> np.ndarray:
    """Wall time from the end of the previous call on any issuing thread to each call's start, less the recording
    costs recorded there (traces without the CPU clock)."""
    start, end = _host_ends(calls, marks, host)
    reach = np.maximum.accumulate(end)
    own = issuing[marks]
    before = np.concatenate([start[:1], reach[:-1]])[own]
    start = start[own]
    gap = np.maximum(start - before, 0).astype("float64")
    return gap - emulation_overhead_ns(*_recorded_in(ops, calls, rows, before, start))


def _cpu_gaps(
    calls: pd.DataFrame, ops: pd.DataFrame, rows: np.ndarray, marks: np.ndarray, issuing: np.ndarray, host: np.ndarray
) -> np.ndarray:
    """The issuing thread's CPU time from the end of its previous call to each call's start, less the recording costs
    recorded on that thread meanwhile. A thread that slept or waited for another (a handoff) spent no CPU doing so,
    and other processes' time slices are not the thread's."""
    start, end = _host_ends(calls, marks, host)
    cpu_start = calls["cpu_start_ns"].to_numpy(dtype="float64", na_value=np.nan)[marks]
    cpu_end = cpu_start + calls["cpu_duration_ns"].to_numpy(dtype="float64", na_value=np.nan)[marks]
    frame = pd.DataFrame({"thread": calls["thread_id"].fillna(-1).to_numpy(dtype="int64")[marks]})
    # a thread id the kernel gave again to a new thread: its clock starts again below the last thread's readings
    earlier = frame.assign(cpu_start=cpu_start).groupby("thread", sort=False)["cpu_start"]
    restart = (cpu_start < earlier.transform(lambda s: s.ffill().shift()).to_numpy()).astype("int64")
    frame["life"] = pd.Series(restart).groupby(frame["thread"].to_numpy(), sort=False).cumsum().to_numpy()
    frame["cpu_end"], frame["wall_end"] = cpu_end, end
    by_thread = frame.groupby(["thread", "life"], sort=False)
    # rows without a reading (a graph launch's replayed rows but its last) keep the reach of those before them
    cpu_before = by_thread["cpu_end"].transform(lambda s: s.cummax().ffill().shift()).to_numpy()
    wall_before = by_thread["wall_end"].transform(lambda s: s.cummax().shift()).to_numpy()
    own = issuing[marks]
    first = np.isnan(cpu_before[own])
    gap = np.where(first, 0.0, cpu_start[own] - np.nan_to_num(cpu_before[own]))
    wall_before = np.where(first, start[own], wall_before[own]).astype("int64")
    recorded = _recorded_in(ops, calls, rows, wall_before, start[own], per_thread=True)
    return np.maximum(gap, 0.0) - emulation_overhead_ns(*recorded)


def _recorded_in(
    ops: pd.DataFrame,
    calls: pd.DataFrame,
    rows: np.ndarray,
    after: np.ndarray,
    until: np.ndarray,
    per_thread: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per gap (after, until]: the ops the observer recorded there on the issuing threads (`per_thread`: on the
    thread of the call ending the gap), the module ranges among them, and whether the call ending the gap is a
    described Triton launch."""
    call_threads = calls["thread_id"].fillna(-1).to_numpy(dtype="int64")[rows]
    threads = np.unique(call_threads)
    op_threads = (
        ops["thread_id"].fillna(-1).to_numpy(dtype="int64") if len(ops) and "thread_id" in ops else np.zeros(0, "int64")
    )
    counts, module_counts = np.zeros(len(rows), "int64"), np.zeros(len(rows), "int64")
    for group in [[t] for t in threads] if per_thread and len(op_threads) else [threads]:
        mask = np.isin(op_threads, group) if len(op_threads) else np.ones(len(ops), bool)
        gaps = np.isin(call_threads, group)
        recorded = ops.loc[mask, ["start_ns", "name"]] if len(ops) else ops
        starts = np.sort(recorded["start_ns"].to_numpy(dtype="int64")) if len(recorded) else np.zeros(0, np.int64)
        module = recorded["name"].astype(str).str.startswith(MODULE_RANGE_PREFIX).to_numpy() if len(recorded) else []
        module_starts = np.sort(recorded["start_ns"].to_numpy(dtype="int64")[module]) if len(recorded) else starts

        def within(sorted_starts: np.ndarray, gaps: np.ndarray = gaps) -> np.ndarray:
            return np.searchsorted(sorted_starts, until[gaps], "right") - np.searchsorted(
                sorted_starts, after[gaps], "right"
            )

        counts[gaps], module_counts[gaps] = within(starts), within(module_starts)

    launch = contains(calls["api"].iloc[rows], "LaunchKernel")
    triton = np.zeros(len(rows), dtype=bool)
    if launch.any() and "args" in calls:
        triton[launch] = contains(calls["args"].iloc[rows[launch]], TRITON_NOTE_KEY)
    return counts, module_counts, triton.astype(int)


def _robust(
    calls: pd.DataFrame, ops: pd.DataFrame, gap: np.ndarray, labels: np.ndarray, cpu: bool = False
) -> np.ndarray:
    """The gaps of the iterations after the first made robust to the other processes that ran meanwhile: each
    call's is the shortest of the same call over those iterations (the k-th call of its API under its op's name on
    its thread), and, read from wall gaps (not `cpu`), at most `OUTLIER_FACTOR` times the median of that API under
    that op on that thread."""
    names = pd.Series(ops["name"].to_numpy(), index=ops["op_id"].to_numpy()) if len(ops) else pd.Series(dtype=object)
    names = names[~names.index.duplicated()]
    frame = pd.DataFrame(
        {
            "thread": calls["thread_id"].fillna(-1).to_numpy(dtype="int64"),
            "api": calls["api"].astype(str).to_numpy(),
            "op": calls["op_id"].map(names).astype(object).fillna("").astype(str).to_numpy(),
            "iteration": labels,
            "gap": gap,
        }
    )
    key = ["thread", "api", "op"]
    frame["k"] = frame.groupby([*key, "iteration"], sort=False).cumcount()
    shortest = frame.groupby([*key, "k"], sort=False)["gap"].transform("min")
    if cpu:
        return shortest.to_numpy()
    typical = frame.groupby(key, sort=False)["gap"].transform("median")
    return np.minimum(shortest, OUTLIER_FACTOR * typical).to_numpy()
