"""Measured maya_trace_spec runs (profiling campaigns under `data/profiles/`) as measured call frames.

A measured call is the device work of one framework op of one family: the measured kernels of an
op (`api_calls.op_id`) are summed per family, as one cuBLAS call or one PyTorch kernel is priced.
Work launched outside any op counts kernel by kernel. Shapes come from the `gemm_*` columns when the
trace has them, else from the op's inputs (`ops.input_shapes`): GEMMs from the last two matrices
(`linear`: input [..., in] and weight [out, in]) in the call frame's convention (`calls.gemm_of_row_major`), other families from the largest input (`numel`, its
last dimension `row`, the inputs of that size `operands`). Copies and memsets keep their `bytes`.
Collectives are left to the collective model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from maya_trace_spec import Run
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES, dtype_name

from .calls import GATHER_OPS, gathered_size, gemm_of_row_major
from .launch_floor import DEVICE

SHAPE_COLUMNS = ("batch", "m", "n", "k", "numel", "row", "operands")


def profile_runs(root: Path) -> list[Path]:
    """Run directories (those with a `run.parquet`) under `root`."""
    return sorted(p.parent for p in root.rglob("run.parquet")) if root.is_dir() else []


def load_profiles(root: Path) -> pd.DataFrame:
    """Measured calls of every run under `root` (an empty frame when there is none)."""
    frames = [f for f in (load_run(run) for run in profile_runs(root)) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_run(run_dir: Path) -> pd.DataFrame:
    run = Run(run_dir)
    work = _measured_work(run)
    if work.empty:
        return pd.DataFrame()
    work = work.merge(_op_shapes(run), how="left", on=["rank", "op_id"])
    return _as_calls(work, _hardware_by_rank(run)).assign(source=str(run_dir), timing=DEVICE)


def _measured_work(run: Run) -> pd.DataFrame:
    """Measured device durations summed per (rank, op, family); work outside ops stays per call."""
    calls = run.table("api_calls").to_pandas()
    calls = calls[
        (calls["time_source"] == "measured") & calls["device_duration_ns"].gt(0) & (calls["domain"] != "nccl")
    ]
    if calls.empty:
        return pd.DataFrame()
    kernels = run.table("kernels").to_pandas()[["rank", "kernel_id", "family"]]
    calls = calls.merge(kernels, how="left", on=["rank", "kernel_id"])
    api = calls["api"].str.lower()
    calls["family"] = np.select(
        [calls["gemm_m"].notna(), api.str.contains("memcpy|memset")], ["gemm", "copy"], calls["family"].fillna("other")
    )
    calls["copy_op"] = np.where(api.str.contains("memset"), "memset", calls["memcpy_kind"].fillna("DtoD"))
    calls = calls[calls["family"].isin(KERNEL_FAMILIES)]
    calls["group"] = calls["op_id"].astype("float64").fillna(-1 - calls["seq"].astype("float64"))
    first = {
        c: (c, "first")
        for c in ("op_id", "gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtype_a", "gemm_compute_type", "copy_op")
    }
    return calls.groupby(["rank", "group", "family"], as_index=False).agg(
        measured_ns=("device_duration_ns", "sum"), bytes=("bytes", "sum"), **first
    )


def _as_calls(work: pd.DataFrame, hardware_by_rank: dict) -> pd.DataFrame:
    gemm, copy = work["family"] == "gemm", work["family"] == "copy"
    traced = work["gemm_m"].notna()
    dtype = work["gemm_dtype_a"].where(traced, work["input_dtype"]).map(lambda d: dtype_name(d) or d)
    dtype = dtype.where(dtype.isin(list(DTYPE_BYTES)), "fp32").where(~work["gemm_compute_type"].eq("tf32"), "tf32")
    frame = pd.DataFrame(
        {
            "hardware": work["rank"].map(hardware_by_rank),
            "family": work["family"],
            "op": work["copy_op"].where(copy, work["op_name"]).fillna(""),
            "dtype": dtype,
        }
    )
    for column in SHAPE_COLUMNS:
        frame[column] = work[column].where(~copy)
    for column in ("batch", "m", "n", "k"):
        frame[column] = work[f"gemm_{column}"].where(traced, frame[column]).where(gemm)
    frame["bytes"] = work["bytes"].where(copy)
    frame["measured_ns"] = work["measured_ns"].astype("float64")
    return frame


def _op_shapes(run: Run) -> pd.DataFrame:
    ops = run.table("ops").to_pandas()
    names = ops["name"].str.replace("aten::", "", regex=False)
    shapes = [_shape(name, inputs) for name, inputs in zip(names, ops["input_shapes"])]
    frame = pd.DataFrame(shapes, columns=list(SHAPE_COLUMNS), dtype="float64")
    frame["rank"], frame["op_id"], frame["op_name"] = ops["rank"], ops["op_id"], names
    frame["input_dtype"] = [d[0] if d is not None and len(d) else None for d in ops["input_dtypes"]]
    return frame


def _shape(op: str, inputs) -> tuple[float, ...]:
    """(batch, m, n, k) of the op as a matrix product and (numel, row, operands) of its largest input (of a
    gather, its output: `calls.gathered_size`)."""
    tensors = [[int(x) for x in s] for s in (inputs if inputs is not None else []) if s is not None and len(s)]
    if not tensors:
        return (np.nan,) * len(SHAPE_COLUMNS)
    sizes = [float(np.prod(s)) for s in tensors]
    largest = tensors[int(np.argmax(sizes))]
    vector = (max(sizes), float(largest[-1]), float(sizes.count(max(sizes))))
    if op in GATHER_OPS:
        vector = (*gathered_size(op, inputs, vector[0], vector[1]), 1.0)
    matrices = [s for s in tensors if len(s) >= 2]
    if len(matrices) < 2:
        return (np.nan,) * 4 + vector
    a, b = matrices[-2], matrices[-1]
    if op == "linear":
        return gemm_of_row_major(1.0, float(np.prod(a[:-1])), float(b[0]), float(a[-1])) + vector
    return gemm_of_row_major(float(np.prod(a[:-2])), float(a[-2]), float(b[-1]), float(a[-1])) + vector


def _hardware_by_rank(run: Run) -> dict[int, str | None]:
    devices = run.table("devices").to_pandas()
    fallback = run.info.get("hardware")
    if devices.empty:
        return {rank: fallback for rank in run.ranks}
    names = devices["hardware"].fillna(devices["device_name"]).fillna(fallback)
    return dict(zip(devices["rank"], names))
