"""Ground-truth workloads (`<ground truth>/<hardware>/results/<name>.parquet` with the trace of the same
runs, written by `maya profile workload --suite`) and their predicted iteration times."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from maya.profiler.workloads.results import read_results


@dataclass(frozen=True)
class Workload:
    hardware: str
    name: str
    measured_ns: float
    """Median measured iteration time."""
    trace: Path


def workloads(root: Path) -> list[Workload]:
    """Every workload measured with status `ok` and a trace, by hardware and name."""
    found = []
    for results in sorted(root.glob("*/results")):
        for row in read_results(results.parent).to_pylist():
            if row["status"] == "ok" and row["median_ns"] and row["trace_path"]:
                found.append(
                    Workload(
                        row["hardware"] or results.parent.name,
                        row["name"],
                        float(row["median_ns"]),
                        results.parent / row["trace_path"],
                    )
                )
    return found


def digest(root: Path) -> str:
    """Hash of the results files and of the trace files' names and sizes."""
    files = sorted(p for pattern in ("*/results/*.parquet", "*/traces/**/*.parquet") for p in root.glob(pattern))
    h = hashlib.sha256()
    for p in files:
        content = p.read_bytes() if p.parent.name == "results" else str(p.stat().st_size).encode()
        h.update(str(p.relative_to(root)).encode() + hashlib.sha256(content).digest())
    return h.hexdigest()


def predict_iteration_ns(workload: Workload, version: str, warehouse: Path) -> float:
    """The simulator's iteration time for the workload's trace, priced by estimator `version`."""
    from maya.api import PredictOptions, predict

    options = PredictOptions(
        hardware=workload.hardware, durations="estimators", estimator_version=version, warehouse=warehouse
    )
    return float(predict(workload.trace, options).iteration_ns)
