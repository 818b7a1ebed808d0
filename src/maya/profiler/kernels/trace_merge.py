"""The Kineto trace of one profiled chunk as rows of the campaign's trace, plus per-config kernel stats.

The conversion itself is maya_trace_spec's Kineto importer. This module cuts the imported run into
configs by the `maya.config:<key>` / `maya.repeat:<i>` annotation windows (every op, API call and
launched kernel whose host call starts inside a window belongs to it, on whatever thread: backward
ops run on autograd's device thread), drops what lies outside them (set-up and warm-up), tags each
API call with its config, and renumbers ids to continue the campaign's.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from maya_trace_spec import Run
from maya_trace_spec.interop.kineto import import_kineto

from .configs import CONFIG_MARK, KERNEL_FAMILY, REPEAT_MARK
from .results import KernelStats

V = TypeVar("V")


@dataclass(frozen=True)
class IdCounters:
    """Where the campaign's ids continue: next `api_calls.seq`, next `ops.op_id`, kernel name -> id."""

    next_seq: int = 0
    next_op_id: int = 0
    kernel_ids: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkTrace:
    tables: dict[str, list[dict]]
    """Rows of `ops`, `api_calls` and (new names only) `kernels`, ids final."""
    stats: dict[str, KernelStats]
    """By config key."""
    ids: IdCounters
    """The counters after this chunk."""


class _Windows(Generic[V]):
    """Disjoint [start, end) host-time intervals, each with a value."""

    def __init__(self, intervals: list[tuple[int, int, V]]):
        self._intervals = sorted(intervals, key=lambda w: w[0])
        self._starts = [w[0] for w in self._intervals]

    def find(self, t: int | None) -> V | None:
        if t is None:
            return None
        i = bisect_right(self._starts, t) - 1
        if i >= 0 and t < self._intervals[i][1]:
            return self._intervals[i][2]
        return None


def _marked(ops: list[dict], mark: str) -> _Windows[str]:
    return _Windows(
        [
            (o["start_ns"], o["end_ns"], o["name"][len(mark) :])
            for o in ops
            if o["name"].startswith(mark) and o["end_ns"] is not None
        ]
    )


def convert_chunk(kineto_json: Path, ids: IdCounters, config_json: Mapping[str, str]) -> ChunkTrace:
    """Convert one chunk's trace; `config_json` gives each profiled config's canonical JSON by key."""
    with tempfile.TemporaryDirectory(prefix="maya-chunk-") as tmp:
        run = Run(import_kineto([kineto_json], Path(tmp) / "run"))
        ops, calls, kernels = (run.table(name).drop(["rank"]).to_pylist() for name in ("ops", "api_calls", "kernels"))
    configs, repeats = _marked(ops, CONFIG_MARK), _marked(ops, REPEAT_MARK)

    kept_ops = [o for o in ops if configs.find(o["start_ns"]) is not None]
    op_ids = {o["op_id"]: ids.next_op_id + i for i, o in enumerate(kept_ops)}
    op_start = {o["op_id"]: o["start_ns"] for o in kept_ops}
    for o in kept_ops:
        o["op_id"], o["parent_op_id"] = op_ids[o["op_id"]], op_ids.get(o["parent_op_id"])

    local_kernels = {k["kernel_id"]: k for k in kernels}
    kernel_ids = dict(ids.kernel_ids)
    next_kernel_id = max(kernel_ids.values(), default=-1) + 1
    new_kernels: list[dict] = []
    parsed_configs = {key: json.loads(text) for key, text in config_json.items()}
    kept_calls = []
    work: dict[str, dict[int, list[tuple[int, str, int]]]] = defaultdict(lambda: defaultdict(list))
    for c in calls:
        host_ns = op_start.get(c["op_id"]) if c["domain"] == "device" else c["start_ns"]
        key = configs.find(host_ns)
        if key is None:
            continue
        repeat = repeats.find(host_ns)
        name = _copy_name(c)
        if c["kernel_id"] is not None:
            kernel = local_kernels[c["kernel_id"]]
            name = kernel["name"]
            if name not in kernel_ids:
                kernel_ids[name] = next_kernel_id
                next_kernel_id += 1
                family = (
                    kernel["family"]
                    if kernel["family"] != "other"
                    else KERNEL_FAMILY.get(parsed_configs.get(key, {}).get("family"), "other")
                )
                new_kernels.append({**kernel, "kernel_id": kernel_ids[name], "family": family})
            c["kernel_id"] = kernel_ids[name]
        c["seq"] = ids.next_seq + len(kept_calls)
        c["op_id"] = op_ids.get(c["op_id"])
        c["args"] = json.dumps(
            {"config_key": key, "repeat": None if repeat is None else int(repeat), "config": parsed_configs.get(key)}
        )
        kept_calls.append(c)
        if c["device_duration_ns"] is not None and repeat is not None:
            work[key][int(repeat)].append((c["device_start_ns"], name, c["device_duration_ns"]))

    return ChunkTrace(
        tables={"ops": kept_ops, "api_calls": kept_calls, "kernels": new_kernels},
        stats={key: _kernel_stats(by_repeat) for key, by_repeat in work.items()},
        ids=IdCounters(ids.next_seq + len(kept_calls), ids.next_op_id + len(kept_ops), kernel_ids),
    )


def _copy_name(call: dict) -> str:
    """What a call's copy or memset work is called (kernels are named by the kernels table)."""
    if call["memcpy_kind"] is not None:
        return f"Memcpy {call['memcpy_kind']}"
    return "Memset" if call["bytes"] is not None else call["api"]


def _kernel_stats(by_repeat: Mapping[int, list[tuple[int, str, int]]]) -> KernelStats:
    totals = [sum(d for _, _, d in items) for items in by_repeat.values()]
    last = sorted(by_repeat[max(by_repeat)])
    return KernelStats(round(statistics.median(totals)), [name for _, name, _ in last])
