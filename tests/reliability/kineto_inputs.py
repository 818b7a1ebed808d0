"""Kineto (torch.profiler) JSON as Maya imports it: the recorded fixture, edited — values anywhere replaced by
other JSON, keys removed, events added with the fields the importer reads set to anything, ranks clashing,
bytes flipped or cut, gzip — then imported (`import_kineto`). An import either refuses the input with a
documented error, leaving no output, or writes a run that validates."""

from __future__ import annotations

import copy
import gzip
import json
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st
from paths import FIXTURES
from reliability.harness import Corrupt, Surface

from maya_trace_spec import Run
from maya_trace_spec.interop.kineto import KinetoFormatError, import_kineto
from maya_trace_spec.validation import validate_run

ARG_KEYS = [
    "External id",
    "correlation",
    "device",
    "stream",
    "grid",
    "block",
    "shared memory",
    "registers per thread",
    "bytes",
    "Collective name",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Group size",
    "Rank",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Seq",
    "Dst Rank",
    "Src Rank",
    "Input Dims",
    "Input type",
    "Sequence number",
    "Bytes",
    "Addr",
    "Total Allocated",
    "Device Type",
    "Device Id",
    "name",
]
CATS = [
    "cpu_op",
    "user_annotation",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "python_function",
    "ac2g",
]
NAMES = [
    "ProfilerStep#1",
    "aten::mm",
    "Optimizer.step#AdamW.step",
    "autograd::engine::evaluate_function: MmBackward0",
    "record_param_comms",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "Memcpy HtoD (Pageable -> Device)",
    "[memory]",
    "[OutOfMemory]",
    "thread_name",
    "cudaLaunchKernel",
    "nccl:all_reduce",
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(NAMES + CATS),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10,
)
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M", "B", "s", "f"]), "name": st.one_of(st.sampled_from(NAMES), json_value)},
    optional={
        "cat": st.one_of(st.sampled_from(CATS), json_value),
        "ts": st.one_of(st.integers(-(1 << 66), 1 << 66), st.floats(-1e20, 1e20), json_value),
        "dur": st.one_of(st.integers(-10, 1 << 66), st.floats(-10, 1e20), json_value),
        "pid": st.one_of(st.integers(-(1 << 66), 1 << 66), st.text(max_size=5)),
        "tid": st.one_of(st.integers(-(1 << 66), 1 << 66), st.text(max_size=5)),
        "args": st.one_of(st.dictionaries(st.sampled_from(ARG_KEYS), json_value, max_size=5), json_value),
    },
)


@dataclass(frozen=True)
class Edit:
    kind: str  # set, delete, add_event, top
    index: int
    key: str
    value: Any


edit = st.one_of(
    st.builds(
        Edit,
        st.just("set"),
        st.integers(0, 999),
        st.sampled_from(["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]),
        json_value,
    ),
    st.builds(Edit, st.just("arg"), st.integers(0, 999), st.sampled_from(ARG_KEYS), json_value),
    st.builds(
        Edit,
        st.just("delete"),
        st.integers(0, 999),
        st.sampled_from(["ph", "name", "ts", "dur", "args", "cat"]),
        st.none(),
    ),
    st.builds(Edit, st.just("add_event"), st.integers(0, 999), st.just(""), event),
    st.builds(
        Edit,
        st.just("top"),
        st.just(0),
        st.sampled_from(
            [
                "distributedInfo",
                "baseTimeNanoseconds",
                "deviceProperties",
                "traceEvents",
                "cuda_runtime_version",
                "torch_version",
                "host_name",
            ]
        ),
        json_value,
    ),
    st.builds(Edit, st.just("dist"), st.just(0), st.sampled_from(["rank", "world_size", "pg_config"]), json_value),
)


@dataclass(frozen=True)
class KinetoInput:
    edits: tuple[tuple[Edit, ...], ...]
    """Edits of each file's document (one file per rank)."""
    raw: tuple[tuple[int, int], ...] = ()
    """(position, byte) edits of the first file's bytes."""
    cut: float = 1.0
    gzip: bool = False
    ranks: tuple[Any, ...] | None = None
    hardware: str | None = None


inputs = st.builds(
    KinetoInput,
    st.lists(st.lists(edit, max_size=6).map(tuple), min_size=1, max_size=3).map(tuple),
    st.one_of(st.just(()), st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), max_size=3).map(tuple)),
    st.one_of(st.just(1.0), st.just(1.0), st.floats(0, 1)),
    st.booleans(),
    st.one_of(st.none(), st.none(), st.none(), st.lists(st.integers(-2, 5), max_size=4).map(tuple)),
    st.sampled_from([None, "h100-sxm", "no-such-gpu"]),
)


@lru_cache(maxsize=1)
def fixture() -> dict:
    return json.loads((FIXTURES / "kineto_gpu_small.json").read_text())


def _document(rank: int, edits: tuple[Edit, ...]) -> dict:
    doc = copy.deepcopy(fixture())
    doc["distributedInfo"]["rank"] = rank
    for e in edits:
        events = doc.get("traceEvents")
        target = events[e.index % len(events)] if isinstance(events, list) and events else None
        if e.kind == "top":
            doc[e.key] = e.value
        elif e.kind == "dist" and isinstance(doc.get("distributedInfo"), dict):
            doc["distributedInfo"][e.key] = e.value
        elif e.kind == "add_event" and isinstance(events, list):
            events.insert(e.index % (len(events) + 1), e.value)
        elif not isinstance(target, dict):
            continue
        elif e.kind == "set":
            target[e.key] = e.value
        elif e.kind == "delete":
            target.pop(e.key, None)
        elif e.kind == "arg":
            if not isinstance(target.get("args"), dict):
                target["args"] = {}
            target["args"][e.key] = e.value
    return doc


def check(x: KinetoInput) -> None:
    with tempfile.TemporaryDirectory(prefix="maya-fuzz-kineto-") as tmp:
        files = []
        for rank, edits in enumerate(x.edits):
            data = json.dumps(_document(rank, edits)).encode()
            if rank == 0:
                data = bytearray(data[: max(0, int(len(data) * x.cut))])
                for pos, value in x.raw:
                    if data:
                        data[pos % len(data)] = value
                data = bytes(data)
            path = Path(tmp) / f"rank{rank}.json"
            if x.gzip:
                data, path = gzip.compress(data), path.with_suffix(".json.gz")
            path.write_bytes(data)
            files.append(path)
        out = Path(tmp) / "out"
        try:
            import_kineto(files, out, ranks=list(x.ranks) if x.ranks is not None else None, hardware=x.hardware)
        except BaseException:
            if out.exists() or any(p.name.startswith(".out") for p in Path(tmp).iterdir()):
                raise Corrupt("a refused import left output behind") from None
            raise
        problems = validate_run(out)
        if problems:
            raise Corrupt(f"the imported run does not validate: {problems[:3]}")
        Run(out)


def surfaces() -> list[Surface]:
    return [
        Surface(
            "kineto import",
            inputs,
            check,
            errors=(KinetoFormatError, ValueError, FileExistsError),
            not_errors=(pa.ArrowException, UnicodeError),
        )
    ]
