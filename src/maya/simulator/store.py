"""Predictions in the DuckDB warehouse: table `predictions`, one row per `maya predict`, written in one
transaction (a failure leaves no row)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from maya.core.warehouse import connect

from .report import Prediction

SCHEMA = """
CREATE TABLE IF NOT EXISTS predictions (
    prediction_id           VARCHAR PRIMARY KEY,
    run_id                  VARCHAR NOT NULL,
    run_path                VARCHAR NOT NULL,
    created_at              TIMESTAMP NOT NULL,
    hardware                VARCHAR NOT NULL,
    durations               VARCHAR NOT NULL,
    world_size              INTEGER NOT NULL,
    simulated_ranks         INTEGER NOT NULL,
    iterations              INTEGER NOT NULL,
    steady_iterations       INTEGER NOT NULL,
    iteration_ms            DOUBLE NOT NULL,
    compute_ms              DOUBLE NOT NULL,
    exposed_comm_ms         DOUBLE NOT NULL,
    host_bound_ms           DOUBLE NOT NULL,
    idle_ms                 DOUBLE NOT NULL,
    mfu                     DOUBLE NOT NULL,
    peak_memory_bytes       BIGINT NOT NULL,
    memory_capacity_bytes   BIGINT NOT NULL,
    oom                     BOOLEAN NOT NULL,
    tokens_per_s            DOUBLE,
    price_per_gpu_hour      DOUBLE,
    cost_per_iteration      DOUBLE,
    cost_per_million_tokens DOUBLE,
    report                  JSON NOT NULL
);
"""


def store_prediction(prediction: Prediction, warehouse: str | Path | None = None) -> str:
    """Insert the prediction; returns its id."""
    prediction_id = uuid.uuid4().hex
    p = prediction
    con = connect(warehouse)
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(SCHEMA)
            con.execute(
                f"INSERT INTO predictions VALUES (?, ?, ?, now(), {', '.join(['?'] * 20)})",
                [
                    prediction_id,
                    p.run_id,
                    p.run_path,
                    p.hardware,
                    p.durations,
                    p.world_size,
                    p.simulated_ranks,
                    p.iterations,
                    p.steady_iterations,
                    p.iteration_ns / 1e6,
                    p.compute_ns / 1e6,
                    p.exposed_comm_ns / 1e6,
                    p.host_bound_ns / 1e6,
                    p.idle_ns / 1e6,
                    p.mfu,
                    p.peak_memory_bytes,
                    p.memory_capacity_bytes,
                    p.oom,
                    p.tokens_per_s,
                    p.price_per_gpu_hour,
                    p.cost_per_iteration,
                    p.cost_per_million_tokens,
                    json.dumps(p.to_dict()),
                ],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        con.close()
    return prediction_id
