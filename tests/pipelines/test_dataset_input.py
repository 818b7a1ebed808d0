"""Regressions found by fuzzing (tests/reliability): measured-kernel files the pipelines read are refused with a
`ProfileFileError` naming the problem, or split into valid and rejected rows — never another exception — and
`maya estimators eval` refuses datasets it cannot compare with one error line."""

import io
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware
from maya.estimators import Registry, TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.neusight_data import NeuSightFormatError, check_complete, to_calls
from maya.estimators.training_data import neusight_dir
from maya.pipelines.profile_readers import ProfileFileError, read_profile
from maya.pipelines.profile_schema import split_valid
from maya.pipelines.sources import MEASUREMENTS, NEUSIGHT, Partition, catalog_name
from maya.profiler.kernels.measurements import VERSION_KEY

H100 = Partition("h100-sxm", "fuzz")


def parquet(table: dict | pa.Table, metadata: dict | None = None) -> bytes:
    sink = io.BytesIO()
    t = table if isinstance(table, pa.Table) else pa.table(table)
    pq.write_table(t.replace_schema_metadata(metadata) if metadata else t, sink)
    return sink.getvalue()


def test_hardware_names_that_are_not_text_are_unknown():
    """A NeuSight row without a device made `hardware.get` call `.lower()` on NaN."""
    with pytest.raises(hardware.UnknownHardware):
        hardware.get(float("nan"))
    assert catalog_name(None) == ""


def test_neusight_rows_without_a_device_are_counted_not_crashed_on():
    raw = parquet(
        {
            "op": ["bmm", "add"],
            "device": [None, "NVIDIA H100 80GB HBM3"],
            "latency_ms": [1.0, 0.1],
            "b": [1, 8],
            "m": [64, None],
            "n": [64, None],
            "k": [64, None],
            "h": [None, 1024],
        }
    )
    frame, left_out, _ = read_profile(raw, NEUSIGHT, H100)
    assert len(frame) == 1 and left_out == {"rows without a device name (no partition's)": 1}
    valid, rejected = split_valid(frame, H100.hardware)
    assert len(valid) == 1 and rejected.empty


def test_a_file_with_no_row_for_the_partition_splits_into_nothing():
    """An empty frame had untyped columns: pandera failed the schema itself (WRONG_DATATYPE), which
    `split_valid` re-raises as a reader's bug."""
    raw = parquet(
        {
            "op": ["bmm"],
            "device": ["Tesla T4"],
            "latency_ms": [1.0],
            "b": [1],
            "m": [2],
            "n": [3],
            "k": [4],
            "h": [None],
        }
    )
    frame, _, _ = read_profile(raw, NEUSIGHT, H100)
    valid, rejected = split_valid(frame, H100.hardware)
    assert valid.empty and rejected.empty


def test_a_measurements_version_that_is_not_text_is_named():
    raw = parquet({"op": ["mm"], "dtype": ["bf16"], "status": ["ok"], "median_ns": [10]}, {VERSION_KEY: b"\xff"})
    with pytest.raises(ProfileFileError, match="measurements version '\ufffd'"):
        read_profile(raw, MEASUREMENTS, H100)


def test_a_shape_column_that_is_not_numbers_is_named():
    raw = parquet({"op": ["mm"], "dtype": ["bf16"], "status": ["ok"], "median_ns": [10], "m": ["True"]})
    with pytest.raises(ProfileFileError, match="column 'm' holds values that are not numbers"):
        read_profile(raw, MEASUREMENTS, H100)


def test_neusight_columns_that_are_not_numbers_are_named():
    with pytest.raises(NeuSightFormatError, match="column 'latency_ms' holds values that are not numbers"):
        to_calls(pd.DataFrame({"op": ["add"], "device": ["Tesla T4"], "latency_ms": ["fast"], "b": [1], "h": [2]}))


@pytest.mark.parametrize(
    "column, value",
    [("latency_ms", np.nan), ("latency_ms", 0.0), ("latency_ms", -1.0), ("m", np.nan), ("b", 0), ("h", np.inf)],
)
def test_eval_needs_every_size_and_a_positive_latency(column, value):
    row = {
        "op": "bmm" if column in "bmnk" else "add",
        "device": "Tesla T4",
        "latency_ms": 1.0,
        "b": 2,
        "m": 64,
        "n": 64,
        "k": 64,
        "h": 128,
    }
    with pytest.raises(NeuSightFormatError, match="without a finite positive"):
        check_complete(to_calls(pd.DataFrame([{**row, column: value}])))


@pytest.mark.slow
def test_eval_cli_refuses_incomplete_rows_and_bad_devices(tmp_path):
    """A NaN latency made sklearn raise "Input contains NaN"; a missing device crashed `hardware.get`."""
    test_rows = pd.read_parquet(neusight_dir() / "kernels_test.parquet")
    measurements = to_calls(test_rows.sample(400, random_state=0)).assign(timing="isolated")
    estimator = train(
        measurements, TrainConfig(params=ModelParams(n_estimators=5, max_depth=2), validate=False, min_rows=5)
    ).estimator
    warehouse = tmp_path / "w.duckdb"
    Registry(warehouse).register(estimator, data_hash="d", config_hash="c", metrics={})
    rows = test_rows[test_rows["op"] == "bmm"].head(3).copy()
    for label, change, message in [
        ("nan", {"latency_ms": np.nan}, "without a finite positive latency_ms"),
        ("nodevice", {"device": None}, "unknown device"),
        ("huge", {"m": 2.0**64}, "2^63 and above"),
    ]:
        bad = rows.assign(**change)
        path = tmp_path / f"{label}.parquet"
        bad.to_parquet(path)
        r = CliRunner().invoke(app, ["estimators", "eval", "--dataset", str(path), "--warehouse", str(warehouse)])
        assert r.exit_code == 1, r.output
        assert message in r.output.replace("\n", " "), r.output


def damaged(flip_footer: bool = False) -> bytes:
    """A NeuSight file whose pandas metadata lacks `index_columns`, or whose footer has a byte flipped so that
    pyarrow raises ArrowNotImplementedError ("Integers with more than 64 bits")."""
    table = pa.Table.from_pandas(
        pd.DataFrame(
            {"op": ["bmm"], "device": ["Tesla T4"], "latency_ms": [1.0], "b": [2], "m": [64], "n": [64], "k": [64]}
        )
    )
    if not flip_footer:
        meta = json.loads(table.schema.metadata[b"pandas"])
        del meta["index_columns"]
        return parquet(table, {**table.schema.metadata, b"pandas": json.dumps(meta).encode()})
    data = parquet(table)
    footer = len(data) - int.from_bytes(data[-8:-4], "little") - 8
    for i in range(footer, len(data) - 8):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            try:
                pq.read_table(io.BytesIO(bytes(flipped)))
            except pa.ArrowNotImplementedError:
                return bytes(flipped)
            except Exception:  # noqa: BLE001 - looking for one kind of damage
                continue
    raise AssertionError("no footer flip makes pyarrow raise ArrowNotImplementedError")


@pytest.mark.parametrize(
    "flip_footer",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # the footer search: ~10 s
    ids=["pandas-metadata", "footer"],
)
def test_damaged_files_are_refused_by_the_pipelines_and_eval(flip_footer, tmp_path):
    """Found by fuzzing `maya estimators eval`: ArrowNotImplementedError and pandas' KeyError('index_columns')
    escaped as tracebacks."""
    data = damaged(flip_footer)
    with pytest.raises(ProfileFileError):
        read_profile(data, NEUSIGHT, H100)
    path = tmp_path / "kernels.parquet"
    path.write_bytes(data)
    r = CliRunner().invoke(app, ["estimators", "eval", "--dataset", str(path)])
    assert r.exit_code == 1 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    assert "kernels.parquet" in r.output
