"""`store_prediction` writes one `predictions` row by column name, in one transaction."""

import json
from dataclasses import fields

import duckdb
import pytest

from maya.core.warehouse_schema import TABLES
from maya.simulator.report import Prediction
from maya.simulator.store import store_prediction


def _prediction() -> Prediction:
    """A prediction whose every number is distinct, so a value stored in another column shows."""
    values = {}
    for i, f in enumerate(fields(Prediction), start=1):
        kind = str(f.type)
        if f.name == "ranks":
            values[f.name] = []
        elif kind.startswith("str"):
            values[f.name] = f"{f.name}-value"
        elif kind == "bool":
            values[f.name] = True
        elif kind.startswith(("int", "float")):
            values[f.name] = i * 1000 + (0.5 if kind.startswith("float") else 0)
    return Prediction(**values)


def test_a_prediction_lands_in_its_named_columns_whatever_the_table_order(tmp_path):
    """A warehouse whose `predictions` columns are in another order (as an added column would leave them):
    every value is stored in its own column, none shifted."""
    path = tmp_path / "w.duckdb"
    reordered = ",\n".join(reversed([c.strip() for c in TABLES["predictions"].strip().split(",\n")]))
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE predictions ({reordered})")
    con.close()
    p = _prediction()
    prediction_id = store_prediction(p, path)
    con = duckdb.connect(str(path), read_only=True)
    row = con.execute("SELECT * FROM predictions").df().iloc[0]
    con.close()
    assert row["prediction_id"] == prediction_id and row["run_id"] == "run_id-value"
    assert row["hardware"] == "hardware-value" and row["durations"] == "durations-value"
    assert row["world_size"] == p.world_size and row["simulated_ranks"] == p.simulated_ranks
    assert row["iteration_ms"] == pytest.approx(p.iteration_ns / 1e6)
    assert row["idle_ms"] == pytest.approx(p.idle_ns / 1e6)
    assert row["peer_wait_ms"] == pytest.approx(p.peer_wait_ns / 1e6)
    assert row["mfu"] == pytest.approx(p.mfu) and row["hfu"] == pytest.approx(p.hfu)
    assert row["peak_memory_bytes"] == p.peak_memory_bytes and bool(row["oom"]) is True
    assert row["cost_per_million_tokens"] == pytest.approx(p.cost_per_million_tokens)
    assert json.loads(row["report"])["run_id"] == "run_id-value"
