"""A run's tables as the simulator reads them: one `RankTrace` per captured rank."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from maya.core import pipeline_stages
from maya_trace_spec import Run

from .iterations import call_iterations


@dataclass
class RankTrace:
    """The captured tables of one rank; `calls` is ordered by `seq`.

    Tables read from a run share Arrow's buffers (`_frame`): their numeric columns are read-only, so code that
    writes into a frame built from them writes into columns of its own (a copy, or a new column)."""

    rank: int
    calls: pd.DataFrame
    ops: pd.DataFrame
    kernels: pd.DataFrame
    communicators: pd.DataFrame
    memory: pd.DataFrame
    device: dict = field(default_factory=dict)
    _call_ops: tuple = field(default=(), init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: object) -> None:
        """Replacing `calls` or `ops` drops the lookup `call_ops` kept of the old ones (and with it the old frame)."""
        if name in ("calls", "ops"):
            object.__setattr__(self, "_call_ops", ())
        object.__setattr__(self, name, value)

    def call_ops(self) -> tuple[np.ndarray, np.ndarray]:
        """(`first`, `where`): the rows of `ops` that `ops.drop_duplicates("op_id")` keeps, and per call the position
        of its op among them (-1: none), both read-only. Looked up once per `calls` and `ops` (again when either is
        replaced): a rank's ~1M calls and ~700k ops, read by the work columns, the iterations and the host time."""
        if self._call_ops and self._call_ops[0] is self.calls and self._call_ops[1] is self.ops:
            return self._call_ops[2], self._call_ops[3]
        if len(self.ops):
            first = np.flatnonzero(~self.ops["op_id"].duplicated().to_numpy())
            ids = pd.Index(self.ops["op_id"].to_numpy()[first])
            where = ids.get_indexer(self.calls["op_id"]) if len(self.calls) else np.zeros(0, dtype=np.intp)
        else:
            first, where = np.zeros(0, dtype=np.intp), np.full(len(self.calls), -1, dtype=np.intp)
        first.setflags(write=False)
        where.setflags(write=False)
        self._call_ops = (self.calls, self.ops, first, where)
        return first, where

    def distinct_ops(self, columns: list[str]) -> pd.DataFrame:
        """`ops[columns].drop_duplicates("op_id")` (the rows `call_ops` numbers), without a copy when no op repeats."""
        first, _ = self.call_ops()
        ops = self.ops[columns]
        return ops if len(first) == len(ops) else ops.iloc[first]

    @property
    def represents(self) -> list[int]:
        """Ranks this trace stands for, itself first."""
        value = self.device.get("represents")
        listed = [] if value is None else [int(r) for r in value]
        return [self.rank, *[r for r in listed if r != self.rank]]


@dataclass
class TraceSet:
    run_id: str
    path: Path
    info: dict
    ranks: dict[int, RankTrace]
    cut_before: int | None = None
    """The iteration `keep_complete_iterations` cut an interrupted run's ranks before (None: not cut)."""

    @property
    def hardware(self) -> str | None:
        return self.info.get("hardware") or next(
            (t.device.get("hardware") for t in self.ranks.values() if t.device.get("hardware")), None
        )

    @property
    def nproc_per_node(self) -> int | None:
        return self.info.get("nproc_per_node")

    @property
    def attrs(self) -> dict:
        """The run's free-form attributes (the `run` table's JSON `attrs`); empty when absent or unreadable."""
        text = self.info.get("attrs")
        try:
            attrs = json.loads(text) if isinstance(text, str) and text else {}
        except ValueError:
            return {}
        return attrs if isinstance(attrs, dict) else {}

    def local_of(self, rank: int) -> int:
        """Index of a global rank's GPU within its node: from the run's ranks per node, else the captured device
        row's `local_rank`, else the rank itself (every rank on node 0)."""
        if self.nproc_per_node:
            return rank % self.nproc_per_node
        local = self.ranks[rank].device.get("local_rank") if rank in self.ranks else None
        return rank if local is None or pd.isna(local) else int(local)

    def node_of(self, rank: int) -> int:
        """Node of a global rank: from the run's ranks per node, else the captured device row, else 0."""
        if self.nproc_per_node:
            return rank // self.nproc_per_node
        node = self.ranks[rank].device.get("node") if rank in self.ranks else None
        return 0 if node is None or pd.isna(node) else int(node)


EXACT_TIMES = ("device_start_ns", "end_ns")
"""Nullable epoch-nanosecond columns, read as nullable integers (float64 would round them to 256 ns)."""


ARROW_LISTS = ("input_shapes", "input_dtypes")
"""ops' per-input lists, kept in Arrow (`pd.ArrowDtype`): a Python object per tensor of every op would cost more than
the rest of a trace's tables; the work columns read them in Arrow (`work._largest_inputs`), and turn only the few ops
they read one by one into Python lists (None where null)."""


def listed(values: pd.Series) -> list:
    """An `ARROW_LISTS` column (or one of Python lists) as Python values: None where null."""
    return [None if value is pd.NA else value for value in values.tolist()]


def _frame(table: pa.Table) -> pd.DataFrame:
    lists = [name for name in ARROW_LISTS if name in table.column_names]
    frame = table.drop_columns(lists).to_pandas(split_blocks=True)  # no copy into 2-D blocks of a dtype
    for name in lists:
        at = table.column_names.index(name)
        frame.insert(at, name, pd.Series(pd.arrays.ArrowExtensionArray(table.column(name)), index=frame.index))
    for name in EXACT_TIMES:
        if name in table.column_names:
            frame[name] = table.column(name).to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    return frame


def _split(frame: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per rank, its rows without `rank`, in their order: slices where the rows are grouped by rank already (as
    the reader concatenates a table's files, rank by rank), else grouped."""
    ranks = frame["rank"].to_numpy()
    if len(ranks) and (ranks[1:] >= ranks[:-1]).all():
        starts = np.r_[0, np.flatnonzero(ranks[1:] != ranks[:-1]) + 1, len(ranks)]
        return {
            int(ranks[a]): frame.iloc[a:b].drop(columns="rank").reset_index(drop=True)
            for a, b in zip(starts[:-1], starts[1:])
        }
    return {int(r): g.drop(columns="rank").reset_index(drop=True) for r, g in frame.groupby("rank", sort=True)}


def _by_rank(run: Run, name: str) -> dict[int, pd.DataFrame]:
    table = run.table(name)
    if table.num_rows == 0:
        return {}
    return _split(_frame(table))


def _sorted(calls: pa.Table) -> pa.Table:
    """api_calls ordered by rank, then `seq` (a reordering only where the files are not in that order)."""
    rank, seq = (calls.column(c).to_numpy() for c in ("rank", "seq"))
    ordered = (rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (seq[1:] >= seq[:-1]))
    if ordered.all():
        return calls
    return calls.take(pc.sort_indices(calls, [("rank", "ascending"), ("seq", "ascending")]))


def load(run_dir: str | Path) -> TraceSet:
    """Read every per-rank table of a run (ranks without api_calls are not captured)."""
    run = Run(run_dir)
    frames = _split(_frame(_sorted(run.table("api_calls"))))
    tables = {name: _by_rank(run, name) for name in ("ops", "kernels", "communicators", "memory_events", "devices")}

    @functools.cache
    def empty(name: str) -> pd.DataFrame:  # read again only for a rank without rows in the table
        return run.table(name).to_pandas().drop(columns="rank").iloc[:0]

    ranks = {}
    for rank, frame in frames.items():

        def get(name: str) -> pd.DataFrame:
            return tables[name][rank] if rank in tables[name] else empty(name)

        devices = get("devices")
        ranks[rank] = RankTrace(
            rank=rank,
            calls=frame,
            ops=get("ops"),
            kernels=get("kernels"),
            communicators=get("communicators"),
            memory=get("memory_events"),
            device=devices.iloc[0].to_dict() if len(devices) else {},
        )
    traces = TraceSet(run_id=run.info["run_id"], path=Path(run_dir), info=run.info, ranks=ranks)
    stopped = traces.attrs.get("stopped_at_iteration") or {}
    for rank, trace in ranks.items():
        if stopped.get(str(rank)) is not None:
            trace.calls = _before_iteration(trace, int(stopped[str(rank)]))
    try:
        ranks.update(rebuilt_stages(traces))
    except pipeline_stages.ScheduleError as e:
        raise ValueError(
            f"run {traces.run_id} ({run_dir}): its interior pipeline stages cannot be rebuilt from stage 1's capture "
            f"({e}); emulate it again with --no-dedup to capture every stage"
        ) from e
    return traces


def _rebuilt_table(name: str) -> property:
    """A rebuilt stage's table `name`, built from its captured stage's when read (`RebuiltTrace._recent`); only the
    dataclass's own initial None may be assigned."""

    def assign(trace: RebuiltTrace, value: None) -> None:
        if value is not None:
            raise TypeError(f"a rebuilt stage's {name} are built from its captured stage's: cut a copy (`copied`)")

    return property(lambda trace: trace._recent(name), assign)


class RebuiltTrace(RankTrace):
    """An interior pipeline stage rebuilt from a captured stage's rank (`rebuilt_stages`) whose `calls`, `ops` and
    `communicators` are not held: built from the captured rank's on each read (`pipeline_stages.rebuilt_calls`,
    `rebuilt_ops`), the last stage read kept (`_RECENT`), so a job of 60 rebuilt stages holds one rebuilt copy at a
    time. Its `kernels`, `memory` are the captured rank's. Its tables cannot be assigned: an interrupted run cuts a
    copy (`copied`)."""

    def __init__(
        self, rank: int, source: RankTrace, pipeline: pipeline_stages.Pipeline, cut: pipeline_stages.Split, stage: int
    ) -> None:
        shift = stage - cut.stage
        device = {
            **source.device,
            "represents": [pipeline.translate(r, shift) for r in source.represents],
            "rebuilt_from": source.rank,
        }
        object.__setattr__(self, "_recipe", (source, pipeline, cut, stage))
        super().__init__(rank, None, None, source.kernels, None, source.memory, device)

    def _recent(self, name: str) -> pd.DataFrame:
        """Rebuilt table `name` (`calls`, `communicators` or `ops`), built or the last built: the calls and groups
        together, the ops only when read."""
        if _RECENT.get("trace") is not self:
            _RECENT.clear()  # the previous stage's tables go before this one's are built
            _RECENT["trace"] = self
        if name not in _RECENT:
            source, pipeline, cut, stage = self._recipe
            if name == "ops":
                _RECENT["ops"] = pipeline_stages.rebuilt_ops(source.calls, source.ops, pipeline, cut, stage)
            else:
                _RECENT["calls"], _RECENT["communicators"] = pipeline_stages.rebuilt_calls(
                    source.calls, source.communicators, pipeline, cut, stage
                )
        return _RECENT[name]

    def copied(self) -> RankTrace:
        """The stage as a `RankTrace` holding its own tables (for an interrupted capture's cut)."""
        calls, ops, communicators = self.calls, self.ops, self.communicators
        return RankTrace(self.rank, calls, ops, self.kernels, communicators, self.memory, dict(self.device))

    def order(self) -> np.ndarray:
        """Per call, its row in the captured rank's calls."""
        _, pipeline, cut, stage = self._recipe
        return pipeline_stages.rows(pipeline_stages.rebuild(cut, pipeline.stages, stage))

    calls = _rebuilt_table("calls")
    ops = _rebuilt_table("ops")
    communicators = _rebuilt_table("communicators")

    def call_ops(self) -> tuple[np.ndarray, np.ndarray]:
        """`RankTrace.call_ops` of the tables read last (kept with them, not with the trace)."""
        calls = self.calls
        if _RECENT.get("lookup_of") is not calls:
            object.__setattr__(self, "_call_ops", ())
            _RECENT["lookup"] = RankTrace.call_ops(self)
            _RECENT["lookup_of"] = calls
            object.__setattr__(self, "_call_ops", ())
        return _RECENT["lookup"]


_RECENT: dict = {}
"""The tables of the rebuilt stage read last (`RebuiltTrace`)."""


def forget_rebuilt_tables() -> None:
    """Let the tables of the rebuilt stage read last go (built again if read again)."""
    _RECENT.clear()


def rebuilt_stages(traces: TraceSet) -> dict[int, RankTrace]:
    """The interior pipeline stages the emulator left to be rebuilt from stage 1's captures (the run's attrs
    `stage_rebuild`, `core/pipeline_stages.py`; under the interleaved schedule odd stages from stage 1's and even
    ones from stage 2's, attrs `from`): per captured rank of a source stage and stage `s` listed that is rebuilt from
    it, the rank playing its part in stage `s` (a `RebuiltTrace`), its calls in `s`'s order, its peers and groups
    moved, standing for its source counterparts' ranks moved likewise (`device["rebuilt_from"]`: the captured rank).
    Its memory events are its source's: the allocator's segments as the source grew them (a source has at least as
    many micro-batches in flight, but segments come in steps, so stage `s`'s own may hold a segment more)."""
    rebuild = traces.attrs.get("stage_rebuild") or {}
    if not rebuild.get("rebuilt"):
        return {}
    pipeline = pipeline_stages.Pipeline(int(rebuild["stages"]), int(rebuild["stride"]))
    sources = [int(s) for s in np.atleast_1d(rebuild["from"])]
    out: dict[int, RankTrace] = {}
    for rank, trace in sorted(traces.ranks.items()):
        source = pipeline.stage(rank)
        stages = [int(s) for s in rebuild["rebuilt"] if pipeline_stages.source(int(s), sources) == source]
        if source not in sources or not stages:
            continue
        cut = pipeline_stages.split(trace.calls, trace.communicators, pipeline, source)
        if rebuild.get("rule") != pipeline_stages.rule_digest():
            _recheck(traces, trace, pipeline, cut, [int(s) for s in rebuild.get("checked") or []], sources)
        for stage in stages:
            moved = pipeline.translate(rank, stage - source)
            out[moved] = RebuiltTrace(moved, trace, pipeline, cut, stage)
    return out


def _recheck(
    traces: TraceSet,
    trace: RankTrace,
    pipeline: pipeline_stages.Pipeline,
    cut: pipeline_stages.Split,
    checked: list[int],
    sources: list[int],
) -> None:
    """The capture's checked stages rebuilt again from `trace` by this Maya's rule and compared with their captures,
    for a run whose rebuild another rule checked (or one too old to say): raises ScheduleError naming the stage when
    they differ, so a prediction never stands on interior stages no rule of this Maya would have rebuilt."""
    source = pipeline.stage(trace.rank)
    names = dict(zip(trace.kernels["kernel_id"], trace.kernels["name"]))
    for stage in (s for s in checked if pipeline_stages.source(s, sources) == source):
        other = traces.ranks.get(pipeline.translate(trace.rank, stage - source))
        if other is None:
            continue
        reason = pipeline_stages.rebuilt_difference(
            trace.calls,
            trace.communicators,
            pipeline,
            cut,
            stage,
            (other.calls, other.communicators),
            (names, dict(zip(other.kernels["kernel_id"], other.kernels["name"]))),
        )
        if reason:
            raise pipeline_stages.ScheduleError(
                f"stage {stage} rebuilt from rank {trace.rank}'s capture by this Maya's stage-rebuild rule is not "
                f"rank {other.rank}'s capture ({reason}): the run's interior stages were checked by another version "
                "of the rule"
            )


INTERRUPTED = "interrupted"
"""The run status of a capture a stop signal ended (`maya emulate`)."""


def interrupted_by(traces: TraceSet) -> str | None:
    """The signal that interrupted the run's capture (`signal` when unnamed); None when it was not."""
    if traces.info.get("status") != INTERRUPTED:
        return None
    return str(traces.attrs.get("interrupted_by") or "signal")


def capture_statuses(traces: TraceSet) -> dict[int, str]:
    """Each rank's capture status (`complete`, `failed`, `oom`, `interrupted`, ...), a captured rank's also for the
    ranks it stands for, a rebuilt stage's its source rank's: the run's attrs `rank_status`, else (runs captured
    before it) the run's status, with `interrupted_ranks` naming the ranks a signal stopped. A rank a signal
    stopped is `complete` once `keep_complete_iterations` cut the run to the iterations every rank completed."""
    run_status = str(traces.info.get("status"))
    listed = traces.attrs.get("rank_status") or {}
    stopped = traces.attrs.get("interrupted_ranks")
    statuses = {}
    for rank, trace in traces.ranks.items():
        captured = trace.device.get("rebuilt_from", rank)  # a rebuilt stage: its source rank's capture
        status = listed.get(str(captured), run_status)
        if not listed and run_status == INTERRUPTED and stopped is not None and captured not in stopped:
            status = "complete"  # its script ended before the signal
        if status == INTERRUPTED and traces.cut_before is not None:
            status = "complete"  # its calls end with the iterations every rank completed
        statuses |= dict.fromkeys(trace.represents, status)
    return statuses


def keep_complete_iterations(traces: TraceSet) -> None:
    """Cut an interrupted run to the training iterations every rank completed: the last one of each rank the
    signal stopped (attrs `interrupted_ranks`; all when not listed) was cut short, at its own point (ranks run
    in isolation), so all keep the calls before the iteration the first to stop was in. Without optimizer
    steps on those ranks nothing is cut: iterations are then found by repetition, whole ones only. Raises
    ValueError when a rank completed none."""
    by = interrupted_by(traces)
    if by is None:
        return
    listed = traces.attrs.get("interrupted_ranks")
    last = {}
    for rank, trace in traces.ranks.items():
        if listed is not None and rank not in listed:
            continue  # its script ended before the signal
        labels = call_iterations(trace)
        if labels is not None and len(labels):
            last[rank] = int(labels[-1])
    if not any(last.values()):
        return
    first = min(last, key=last.get)
    if last[first] < 1:
        raise ValueError(
            f"{traces.path}: the capture was interrupted by {by} before rank {first} completed a training "
            "iteration: there is nothing to predict from; capture it again and let it run longer"
        )
    for rank, trace in list(traces.ranks.items()):
        if isinstance(trace, RebuiltTrace):  # its tables are rebuilt from stage 1's uncut calls: cut a copy
            traces.ranks[rank] = trace.copied()
    for trace in traces.ranks.values():
        trace.calls = _before_iteration(trace, last[first])
    traces.cut_before = last[first]


def _before_iteration(trace: RankTrace, stop: int) -> pd.DataFrame:
    """The rank's calls before iteration `stop` began, where `maya emulate --iterations` stopped it: what the
    next iteration had started is left out, since it started on some ranks only (a pipeline stage posts its
    first receive before its first module call) and its halves would not match."""
    labels = call_iterations(trace)
    begun = np.flatnonzero(labels >= stop) if labels is not None else []
    return trace.calls.iloc[: begun[0]].reset_index(drop=True) if len(begun) else trace.calls
