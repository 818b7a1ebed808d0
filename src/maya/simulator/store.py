"""Predictions in the DuckDB warehouse: table `predictions` (DDL in `maya.core.warehouse_schema`), one row
per `maya predict`, written in one transaction (a failure leaves no row)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from maya.core.warehouse import insert_row, transaction

from .report import Prediction


def store_prediction(prediction: Prediction, warehouse: str | Path | None = None) -> str:
    """Insert the prediction; returns its id."""
    prediction_id = uuid.uuid4().hex
    with transaction(warehouse) as con:
        insert_row(con, "predictions", prediction_row(prediction, prediction_id))
    return prediction_id


def prediction_row(p: Prediction, prediction_id: str) -> dict[str, object]:
    """The `predictions` row of a prediction: column -> value."""
    return {
        "prediction_id": prediction_id,
        "run_id": p.run_id,
        "run_path": p.run_path,
        "created_at": datetime.now(UTC),
        "hardware": p.hardware,
        "durations": p.durations,
        "world_size": p.world_size,
        "simulated_ranks": p.simulated_ranks,
        "iterations": p.iterations,
        "steady_iterations": p.steady_iterations,
        "iteration_ms": p.iteration_ns / 1e6,
        "compute_ms": p.compute_ns / 1e6,
        "exposed_comm_ms": p.exposed_comm_ns / 1e6,
        "peer_wait_ms": p.peer_wait_ns / 1e6,
        "host_bound_ms": p.host_bound_ns / 1e6,
        "idle_ms": p.idle_ns / 1e6,
        "mfu": p.mfu,
        "hfu": p.hfu,
        "peak_memory_bytes": p.peak_memory_bytes,
        "memory_capacity_bytes": p.memory_capacity_bytes,
        "oom": p.oom,
        "tokens_per_s": p.tokens_per_s,
        "price_per_gpu_hour": p.price_per_gpu_hour,
        "cost_per_iteration": p.cost_per_iteration,
        "cost_per_million_tokens": p.cost_per_million_tokens,
        "report": json.dumps(p.to_dict()),
    }
