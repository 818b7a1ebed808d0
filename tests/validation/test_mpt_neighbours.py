"""`benchmarks/mpt_neighbours.py`: a published row slower per token than its next-longer-sequence neighbour is
flagged, GPU-count growth is measured against the predictions given, and a results file without predictions is
refused with a clear error."""

import pandas as pd
import pytest
from helpers import benchmark_module


@pytest.fixture(scope="module")
def neighbours():
    return benchmark_module("mpt_neighbours")


def rows(records: list[tuple]) -> pd.DataFrame:
    """Published-layout rows (model, gpus, seq, micro-batch, step seconds), one table, no checkpointing."""
    out = pd.DataFrame(records, columns=["model", "gpus", "seq", "micro_batch", "measured_s"])
    out["table"], out["checkpointing"], out["grad_accum"] = "t", "False", 1
    out["micro_tokens"] = out["seq"] * out["micro_batch"]
    out["measured_us_per_token"] = out["measured_s"] / out["micro_tokens"] * 1e6
    out.index.name = "row"
    return out


def test_a_row_slower_than_its_longer_neighbour_rises(neighbours):
    family = neighbours.by_sequence(rows([("a", 8, 4096, 2, 1.0), ("a", 8, 2048, 4, 0.9), ("a", 8, 512, 16, 0.95)]))
    assert family.loc[[1, 2], "rises"].tolist() == [False, True]
    assert family.loc[2, "change_pct"] == pytest.approx(100 * (0.95 / 0.9 - 1))


def test_rows_with_other_tokens_a_micro_batch_are_not_neighbours(neighbours):
    family = neighbours.by_sequence(rows([("a", 8, 4096, 2, 1.0), ("a", 8, 2048, 8, 3.0)]))
    assert family.empty


def test_growth_with_gpu_count_over_predicted_rows(neighbours):
    table = rows([("a", 8, 2048, 4, 1.0), ("a", 64, 2048, 4, 1.1), ("a", 128, 2048, 4, 1.2)])
    predicted = neighbours.with_predictions(table, pd.DataFrame({"row": [0, 1], "predicted": [1.0, 1.02]}))
    growth = neighbours.by_gpu_count(predicted).iloc[0]
    assert growth["gpus"] == "8->64"
    assert growth["measured_growth_pct"] == pytest.approx(10.0)
    assert growth["predicted_growth_pct"] == pytest.approx(2.0)


def test_gpu_count_growth_shows_both_ends_micro_batch_and_accumulation(neighbours):
    """A family whose ends differ in micro-batch or gradient accumulation says so beside its growth."""
    table = rows([("a", 8, 2048, 4, 1.0), ("a", 64, 2048, 8, 2.2)])
    table.loc[0, "grad_accum"] = 4
    growth = neighbours.by_gpu_count(table).iloc[0]
    assert (growth["mb"], growth["ga"]) == ("4->8", "4->1")


def test_results_without_predictions_are_refused(neighbours):
    with pytest.raises(ValueError, match="'row' and 'predicted'"):
        neighbours.with_predictions(rows([("a", 8, 2048, 4, 1.0)]), pd.DataFrame({"row": [0]}))
