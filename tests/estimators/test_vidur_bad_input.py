"""Defects the fuzzing of Vidur's layouts found (tests/reliability/vidur_inputs.py), each pinned: counts that
are not whole numbers, numeric columns of booleans, collective rows a network's cluster cannot hold, and text
that is not UTF-8."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators.dataset_eval import DatasetError, evaluate_file
from maya.estimators.vidur_data import VidurFormatError, check_collectives, check_compute, vidur_dir

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def compute() -> pd.DataFrame:
    rows = pd.read_parquet(vidur_dir() / "compute.parquet")
    return (
        rows[(rows["device"] == H100) & (rows["model"] == "meta-llama/Llama-2-7b-hf") & (rows["op"] == "mlp_up_proj")]
        .head(4)
        .reset_index(drop=True)
    )


@pytest.fixture(scope="module")
def collectives() -> pd.DataFrame:
    rows = pd.read_parquet(vidur_dir() / "collectives.parquet")
    return rows[(rows["network"] == "a100_dgx") & (rows["num_workers"] == 16)].head(4).reset_index(drop=True)


def test_compute_sizes_that_are_not_whole_numbers_are_rejected(compute):
    rows = compute.astype({"num_tokens": "float64", "tp": "float64", "gemm_k": "float64"})
    rows.loc[0, "num_tokens"] = 2.5  # 2.5 tokens: not a measurement
    rows.loc[1, "tp"] = 1e300  # would overflow int64 where stored
    rows.loc[2, "gemm_k"] = 4096.5
    checked = check_compute(rows)
    reasons = dict(zip(checked.rejected["row_index"], checked.rejected["reason"]))
    assert reasons == {
        0: "num_tokens: not a whole number below 2**53 (2.5)",
        1: "tp: not a whole number below 2**53 (1e+300)",
        2: "gemm_k: not a whole number below 2**53 (4096.5)",
    }
    assert checked.calls["row_index"].tolist() == [3]


def test_collective_counts_that_are_not_whole_numbers_are_rejected(collectives):
    rows = collectives.astype({"num_workers": "float64", "devices_per_node": "float64"})
    rows.loc[0, "num_workers"] = 16.5  # stored as 16 ranks before
    rows.loc[1, "devices_per_node"] = 0.5  # stored as 0 GPUs per node (and 32 nodes) before
    rows.loc[2, "num_workers"] = 1e300  # an int64 overflow before
    checked = check_collectives(rows)
    reasons = dict(zip(checked.rejected["row_index"], checked.rejected["reason"]))
    assert set(reasons) == {0, 1, 2}
    assert reasons[0] == "num_workers: not a whole number below 2**53 (16.5)"
    assert "devices_per_node: not a whole number below 2**53 (0.5)" in reasons[1]
    assert reasons[2] == "num_workers: not a whole number below 2**53 (1e+300)"
    assert checked.calls["ranks"].tolist() == [16] and checked.calls["devices_per_node"].tolist() == [8]


@pytest.mark.parametrize("layout", ["compute", "collectives"])
def test_a_time_column_of_booleans_is_not_taken_for_one_millisecond(layout, compute, collectives):
    rows, check = (compute, check_compute) if layout == "compute" else (collectives, check_collectives)
    with pytest.raises(VidurFormatError, match="column time_ms_median is boolean, not a number"):
        check(rows.assign(time_ms_median=True))


def test_eval_notes_collective_rows_their_cluster_cannot_hold_and_evaluates_the_rest(collectives, tmp_path):
    pairs = pd.read_parquet(vidur_dir() / "collectives.parquet")
    pairs = pairs[(pairs["network"] == "a100_pairwise_nvlink") & (pairs["collective"] == "all_reduce")].head(2)
    rows = pd.concat([collectives, pairs], ignore_index=True)
    # 16 ranks, 8 a node: a valid row, but the network's cluster spec (4-GPU pairwise nodes) cannot hold it
    rows.loc[4, ["num_workers", "devices_per_node", "max_devices_per_node"]] = [16, 8, 8]
    dataset = tmp_path / "nccl.parquet"
    rows.to_parquet(dataset)

    def no_estimator():
        raise AssertionError("collectives need no kernel estimator")

    result = evaluate_file(dataset, no_estimator)  # raised ValueError for the whole file before
    assert result.to_json()["all_reduce"]["rows"] == 5
    assert np.isfinite(result.overall["mape"])
    assert any(
        "1 allreduce rows of network 'a100_pairwise_nvlink' (16 ranks on 2 node(s)) not evaluated" in note
        and "put 8 on a node of 4 GPUs" in note
        for note in result.notes
    )
    r = CliRunner().invoke(
        app, ["estimators", "eval", "--dataset", str(dataset), "--warehouse", str(tmp_path / "warehouse.duckdb")]
    )
    assert r.exit_code == 0, r.output  # it failed with "error: None: 16 ranks on 2 node(s) ..." before
    assert "not evaluated" in r.stderr


def _not_utf8(rows: pd.DataFrame, column: str) -> bytes:
    """`rows` as Parquet with `column` as text whose first value has a byte that is not UTF-8 (as a flipped
    byte leaves it: pyarrow reads the file and fails only when the text is converted)."""
    text = rows.astype({column: "str"})
    text.loc[0, column] = "12345678"  # found in the file's bytes by this value
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(text, preserve_index=False), sink, compression="none", use_dictionary=False)
    data = bytearray(sink.getvalue())
    return bytes(data).replace(b"12345678", b"\xff2345678")  # in the page and its statistics


@pytest.mark.parametrize("layout", ["compute", "collectives"])
def test_text_that_is_not_utf8_is_a_damaged_file_for_every_reader(layout, compute, collectives, tmp_path):
    from maya.pipelines.defs.collectives import _validate_file
    from maya.pipelines.profile_readers import ProfileFileError, read_profile
    from maya.pipelines.sources import VIDUR_COLLECTIVES, VIDUR_COMPUTE, NetworkPartition, Partition, ProfileFile

    column = "tp" if layout == "compute" else "num_workers"  # read as numbers: pyarrow raised a bare ArrowException
    data = _not_utf8(compute if layout == "compute" else collectives, column)
    dataset = tmp_path / "damaged.parquet"
    dataset.write_bytes(data)
    with pytest.raises(DatasetError, match="not a readable Parquet file .*UTF8"):
        evaluate_file(dataset, lambda: None)
    if layout == "compute":
        with pytest.raises(ProfileFileError, match="not a readable Parquet file: .*UTF8"):
            read_profile(data, VIDUR_COMPUTE, Partition("h100-sxm", "c"))
    else:
        checked = _validate_file(ProfileFile(dataset, VIDUR_COLLECTIVES), data, NetworkPartition("a100_dgx", "c"))
        valid, quarantined = checked.valid, checked.rejected
        assert (valid is None or valid.empty) and quarantined["reason"].str.match(
            "file rejected: not a readable Parquet file: .*UTF8"
        ).all()
