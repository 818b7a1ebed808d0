"""How much of a trace's kernel time is priced from known work, with and without the Triton launch arguments
the emulator records (`api_calls.args.triton`, trace spec 1.2).

Every device call's work comes from one of:
- its own record: GEMM and attention shapes, copy and memset sizes, a library kernel's element count, a
  Triton launch's arguments;
- its enclosing aten op's input shapes (a kernel launched inside `aten::add`);
- nothing it describes: a kernel inside a wrapper op (`CompiledFunction`, an autograd function, a module
  range) whose shapes are not the kernel's, or outside any op.
"Before" prices the same trace with the Triton arguments removed (what Maya saw until spec 1.2).

    .venv/bin/python benchmarks/triton_work.py RUN_DIR [--durations estimators|roofline] [--hardware NAME]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

from maya.core import hardware as catalog
from maya.simulator.durations import RooflineDurations
from maya.simulator.launch_shape import launch_factor
from maya.simulator.opcodes import COLL, DEVICE_OPS, classify
from maya.simulator.trace import RankTrace, load
from maya.simulator.work import work_frame

SOURCES = ("own record", "aten op", "unknown")


def source_of(trace: RankTrace) -> np.ndarray:
    """Where each call's work comes from (`SOURCES`)."""
    calls = trace.calls
    args = calls["args"].fillna("")
    own = (
        calls["gemm_m"].notna()
        | calls["bytes"].notna()
        | args.str.contains('"attention"|"elements"|"triton"', regex=True)
    ).to_numpy()
    ops = trace.ops.drop_duplicates("op_id").set_index("op_id") if len(trace.ops) else None
    aten = np.zeros(len(calls), dtype=bool)
    if ops is not None:
        names = ops["name"].reindex(calls["op_id"].to_numpy()).astype(str)
        shapes = ops["input_shapes"].reindex(calls["op_id"].to_numpy())
        aten = (
            names.str.startswith("aten::").to_numpy()
            & shapes.map(lambda s: hasattr(s, "__len__") and len(s) > 0).to_numpy()
        )
    return np.where(own, SOURCES[0], np.where(aten, SOURCES[1], SOURCES[2]))


def priced(trace: RankTrace, provider, hw) -> pd.DataFrame:
    opcodes = classify(trace.calls)
    frame = pd.concat([trace.calls, work_frame(trace, opcodes)], axis=1)
    frame["opcode"], frame["comm_size"], frame["comm_nodes"], frame["comm_gpus"] = opcodes, np.nan, np.nan, None
    kernels = np.isin(opcodes, DEVICE_OPS) & (opcodes != COLL)
    device = provider.device_ns(frame, hw) * launch_factor(frame, hw)
    names = dict(zip(trace.kernels["kernel_id"], trace.kernels["name"]))
    return pd.DataFrame(
        {
            "ns": device,
            "source": source_of(trace),
            "triton": trace.calls["kernel_id"].map(names).fillna("").str.startswith("triton").to_numpy(),
            "flops": frame["flops"].to_numpy(),
        }
    )[kernels]


def without_triton(trace: RankTrace) -> RankTrace:
    calls = trace.calls.copy()
    calls["args"] = calls["args"].where(~calls["args"].fillna("").str.contains('"triton"', regex=False), None)
    return RankTrace(trace.rank, calls, trace.ops, trace.kernels, trace.communicators, trace.memory, trace.device)


def report(name: str, table: pd.DataFrame) -> dict:
    total = table["ns"].sum()
    shares = {s: float(table.loc[table["source"] == s, "ns"].sum() / total) for s in SOURCES}
    triton = table[table["triton"]]
    return {
        "case": name,
        "kernel_ms": round(total / 1e6, 3),
        **{f"share {s}": round(v, 4) for s, v in shares.items()},
        "triton_ms": round(triton["ns"].sum() / 1e6, 3),
        "triton share known": round(
            float(triton.loc[triton["source"] != "unknown", "ns"].sum() / max(triton["ns"].sum(), 1e-9)), 4
        ),
        "model GFLOP": round(float(np.nansum(table["flops"])) / 1e9, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--durations", default="estimators", choices=("estimators", "roofline"))
    parser.add_argument("--version", default="latest")
    parser.add_argument("--hardware", default=None)
    a = parser.parse_args()
    traces = load(a.run)
    hw = catalog.get(a.hardware or traces.info.get("hardware") or "h100-sxm")
    if a.durations == "roofline":
        provider = RooflineDurations()
    else:
        from maya.simulator.durations.estimated import EstimatorDurations

        provider = EstimatorDurations(a.version)
    rows = []
    for rank, trace in traces.ranks.items():
        rows.append(report(f"rank {rank} before (no Triton arguments)", priced(without_triton(trace), provider, hw)))
        rows.append(report(f"rank {rank} with Triton arguments", priced(trace, provider, hw)))
    print(f"{a.run} priced by {provider.name} on {hw.name}")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
