"""Accuracy of an estimator version: held-out kernel error per hardware and family on NeuSight's test
split, and end-to-end error on ground-truth workloads (their traces replayed by the simulator)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from maya.core.warehouse import read_only
from maya.estimators import Registry
from maya.estimators.evaluation import comparable_ns, mape
from maya.estimators.neusight_data import load_kernels, neusight_dir

from . import ground_truth
from .resources import DataSources
from .tables import insert


@dataclass(frozen=True)
class Inputs:
    kernels: pd.DataFrame
    """Held-out measured calls (NeuSight's test split; empty without NeuSight)."""
    workloads: list[ground_truth.Workload]
    digest: str
    """Changes when the test split or the ground truth change."""


@dataclass(frozen=True)
class Evaluation:
    version: str
    summary: dict
    kernel_errors: pd.DataFrame
    kernel_predictions: pd.DataFrame
    workload_predictions: pd.DataFrame


def load_inputs(sources: DataSources) -> Inputs:
    test = neusight_dir() / "kernels_test.parquet"
    kernels = load_kernels(test) if sources.neusight else pd.DataFrame()
    workloads = ground_truth.workloads(sources.ground_truth)
    parts = [
        hashlib.sha256(test.read_bytes()).hexdigest() if sources.neusight else "",
        ground_truth.digest(sources.ground_truth),
        _host_factors(workloads),
    ]
    return Inputs(kernels, workloads, hashlib.sha256(json.dumps(parts).encode()).hexdigest())


def _host_factors(workloads: list[ground_truth.Workload]) -> dict[str, str]:
    """The host factor each workload's hardware resolves to (`maya.api.host_factor`: the switch, else its default
    cluster's; it scales the framework time of emulated traces), by hardware."""
    from maya.api import host_factor

    out = {}
    for name in sorted({w.hardware for w in workloads}):
        try:
            out[name] = repr(host_factor(name)[0])
        except (KeyError, ValueError) as e:  # unknown hardware, or a switch that is not a factor
            out[name] = f"unresolved: {e}"
    return out


def evaluate(registry: Registry, version: str, inputs: Inputs) -> Evaluation:
    kernels = _kernel_predictions(registry, version, inputs.kernels)
    errors = (
        kernels.assign(ape=_ape(kernels))
        .groupby(["hardware", "family"], as_index=False)
        .agg(rows=("ape", "size"), mape=("ape", "mean"))
        .assign(version=version)
    )
    workloads = pd.DataFrame(
        [_workload_prediction(w, version, registry.warehouse) for w in inputs.workloads],
        columns=["hardware", "workload", "measured_ns", "predicted_ns", "error"],
    )
    predicted = workloads[workloads["error"].isna()]
    summary = {
        "version": version,
        "kernel_rows": len(kernels),
        "kernel_mape": mape(kernels["measured_ns"].to_numpy(), kernels["predicted_ns"].to_numpy()),
        "workloads": len(workloads),
        "workload_failures": int(workloads["error"].notna().sum()),
        "workload_mape": mape(predicted["measured_ns"].to_numpy(), predicted["predicted_ns"].to_numpy()),
    }
    return Evaluation(version, summary, errors, kernels, workloads.assign(version=version))


def store(con: duckdb.DuckDBPyConnection, evaluation: Evaluation, inputs_digest: str) -> None:
    """Replace the version's evaluation (call inside a transaction)."""
    for table in ("estimator_evaluations", "kernel_errors", "kernel_predictions", "workload_predictions"):
        con.execute(f"DELETE FROM {table} WHERE version = ?", [evaluation.version])
    insert(con, "estimator_evaluations", pd.DataFrame([{**evaluation.summary, "inputs_hash": inputs_digest}]))
    insert(con, "kernel_errors", evaluation.kernel_errors)
    insert(con, "kernel_predictions", evaluation.kernel_predictions)
    insert(con, "workload_predictions", evaluation.workload_predictions)


def suite_rows(warehouse: Path, version: str) -> pd.DataFrame:
    """The validation suites' latest result per row for `version` (`maya.validation.latest`) as end-to-end rows:
    `source` (the suite), `workload` (its row), `hardware`, `measured_ns`, `predicted_ns` (NaN where the row
    failed or ran out of memory under emulation), `failure`."""
    from maya.validation import latest

    rows = latest(warehouse)
    rows = rows[rows["estimator_version"] == version]
    return pd.DataFrame(
        {
            "source": rows["suite"],
            "workload": "row " + rows["row"].astype(str) + " (" + rows["label"] + ")",
            "hardware": rows["hardware"].fillna(rows["gpu"]),
            "measured_ns": rows["measured_s"] * 1e9,
            "predicted_ns": rows["predicted_s"].astype("float64") * 1e9,
            "failure": rows["reason"].where(rows["status"] != "ok"),
        }
    ).reset_index(drop=True)


def end_to_end(warehouse: Path, version: str) -> pd.DataFrame:
    """Every end-to-end comparison of `version`: ground-truth workloads, then suite rows (`suite_rows`)."""
    with read_only(warehouse) as con:
        workloads = con.execute(
            "SELECT 'ground truth' AS source, workload, hardware, measured_ns, predicted_ns, "
            "error AS failure FROM workload_predictions WHERE version = ?",
            [version],
        ).df()
    parts = [p for p in (workloads, suite_rows(warehouse, version)) if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else workloads


def mean_abs_error(rows: pd.DataFrame) -> float | None:
    """Mean |predicted - measured| / measured over the rows with a prediction."""
    done = rows.dropna(subset=["predicted_ns"])
    if done.empty:
        return None
    return float(((done["predicted_ns"] - done["measured_ns"]).abs() / done["measured_ns"]).mean())


def _kernel_predictions(registry: Registry, version: str, kernels: pd.DataFrame) -> pd.DataFrame:
    columns = ["version", "hardware", "family", "op", "method", "measured_ns", "predicted_ns"]
    if kernels.empty:
        return pd.DataFrame(columns=columns)
    predicted = registry.load(version).predict(kernels)
    return predicted.assign(
        version=version,
        measured_ns=kernels["measured_ns"].to_numpy(),
        predicted_ns=comparable_ns(predicted, kernels["timing"]),
    )[columns]


def _workload_prediction(workload: ground_truth.Workload, version: str, warehouse: Path) -> dict:
    row = {
        "hardware": workload.hardware,
        "workload": workload.name,
        "measured_ns": workload.measured_ns,
        "predicted_ns": None,
        "error": None,
    }
    try:
        row["predicted_ns"] = ground_truth.predict_iteration_ns(workload, version, warehouse)
    except Exception as e:  # one workload the simulator cannot replay does not hide the others
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def _ape(frame: pd.DataFrame) -> np.ndarray:
    measured = frame["measured_ns"].to_numpy(dtype="float64")
    return np.abs(frame["predicted_ns"].to_numpy(dtype="float64") - measured) / measured
