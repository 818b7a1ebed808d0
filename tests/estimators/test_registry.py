"""The estimator registry: versions in the DuckDB warehouse, artifacts checked on load, idempotent training."""

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from maya.estimators import ArtifactError, KernelEstimator, Registry, TrainConfig, UnknownVersion, train_version
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.training_data import load_kernels, neusight_dir

SMALL = TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)


@pytest.fixture(scope="module")
def measured():
    train = load_kernels(neusight_dir() / "kernels_train.parquet")
    return train[train["family"].isin(["gemm", "softmax"])].sample(1500, random_state=2).reset_index(drop=True)


@pytest.fixture(scope="module")
def trained_home(measured, tmp_path_factory) -> Path:
    """A MAYA_HOME whose registry holds v1, trained on `measured` with SMALL once for the module (read-only: tests
    that need it copy it into their own MAYA_HOME with `with_v1`)."""
    home = tmp_path_factory.mktemp("trained_home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MAYA_HOME", str(home))
        train_version(measured, SMALL)
    return home


@pytest.fixture
def with_v1(trained_home, maya_home) -> Callable[[], None]:
    """Puts v1 (a copy of `trained_home`'s registry) into this test's MAYA_HOME, as `train_version(measured, SMALL)`
    would."""
    return lambda: shutil.copytree(trained_home, maya_home, dirs_exist_ok=True)


def registry_rows(registry):
    con = duckdb.connect(str(registry.warehouse), read_only=True)
    try:
        return (
            con.execute("SELECT * FROM estimator_versions ORDER BY version").fetchall(),
            con.execute("SELECT * FROM estimator_aliases").fetchall(),
        )
    finally:
        con.close()


@pytest.mark.slow
def test_train_list_show_load(measured, maya_home):
    registry = Registry()
    first = train_version(measured, SMALL)
    assert not first.reused and first.record.version == "v1"
    assert first.record.hardware == sorted(
        set(
            measured["hardware"].map(
                {
                    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
                    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
                    "Tesla T4": "t4",
                    "Tesla P100-PCIE-16GB": "p100-pcie-16gb",
                    "Tesla P4": "p4",
                }
            )
        )
    )
    assert first.record.families == ["gemm", "softmax"] and first.record.training_rows == 1500
    assert (maya_home / "estimators" / "v1" / "model.zip").is_file()
    second = train_version(measured.head(1000), SMALL)
    assert second.record.version == "v2"
    assert [r.version for r in registry.versions()] == ["v1", "v2"] and registry.latest() == "v2"
    assert registry.get("latest") == registry.get("v2") and registry.get("v1").data_hash == first.record.data_hash
    calls = measured.head(20)
    by_name, latest = registry.load("v1").predict(calls), registry.load().predict(calls)
    # measured shapes are looked up, but for calls on their launch floor (their device time is unknown)
    assert (by_name["method"] == "lookup").sum() >= 15 and by_name["method"].isin(["lookup", "model"]).all()
    assert latest["duration_ns"].notna().all()


@pytest.mark.slow
def test_identical_data_reuses_the_version(measured):
    registry = Registry()
    first = train_version(measured, SMALL)
    before = registry_rows(registry)
    again = train_version(measured.sample(frac=1.0, random_state=5), SMALL)  # same rows, other order
    assert again.reused and again.record == first.record
    assert registry_rows(registry) == before
    other = train_version(measured, TrainConfig(params=ModelParams(n_estimators=11, max_depth=3), validate=False))
    assert not other.reused and other.record.version == "v2"


def test_corrupted_or_missing_artifact_is_reported_and_registry_unchanged(with_v1, maya_home):
    with_v1()
    registry = Registry()
    artifact = maya_home / "estimators" / "v1" / "model.zip"
    before = registry_rows(registry)
    raw = bytearray(artifact.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    artifact.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match=r"estimator version v1: artifact .*model.zip is corrupted"):
        registry.load("v1")
    artifact.unlink()
    with pytest.raises(ArtifactError, match=r"estimator version v1: artifact .*model.zip is missing"):
        registry.load("latest")
    assert registry_rows(registry) == before


def test_an_artifact_is_parsed_once_and_still_checked_on_every_load(with_v1, maya_home):
    with_v1()
    registry = Registry()
    first = registry.load("v1")
    assert registry.load("latest") is first and Registry().load("v1") is first
    assert registry.load(registry.get("latest")) is first
    assert first.artifact_sha256 == registry.get("v1").artifact_sha256  # names the stored attention fit
    artifact = maya_home / "estimators" / "v1" / "model.zip"
    raw = bytearray(artifact.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    artifact.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match=r"estimator version v1: artifact .*model.zip is corrupted"):
        registry.load("v1")


def test_the_same_calls_priced_again_are_priced_once(measured, with_v1, monkeypatch):
    with_v1()
    estimator = Registry().load("v1")
    calls = measured.head(40)
    first = estimator.predict(calls)

    def price_again(self, *args):
        raise RuntimeError("priced again")

    monkeypatch.setattr(KernelEstimator, "_price", price_again)
    again = estimator.predict(calls.copy())
    pd.testing.assert_frame_equal(again, first)
    again["duration_ns"] = 0.0  # the caller's copy: the remembered frame is unchanged
    pd.testing.assert_frame_equal(estimator.predict(calls), first)
    with pytest.raises(RuntimeError, match="priced again"):
        estimator.predict(calls.assign(m=calls["m"] + 1))


def test_unknown_version(with_v1):
    registry = Registry()
    with pytest.raises(UnknownVersion, match="none registered yet"):
        registry.load()
    with_v1()
    with pytest.raises(UnknownVersion, match="unknown estimator version 'v9'.*known: v1"):
        registry.get("v9")


def test_failed_registration_leaves_nothing(with_v1, maya_home):
    with_v1()
    registry = Registry()
    estimator = registry.load("v1")
    before = registry_rows(registry)
    with pytest.raises(TypeError, match="not JSON serializable"):  # fails after the artifact was written
        registry.register(estimator, data_hash="d", config_hash="c", metrics={"unserialisable": {1, 2}})
    assert registry_rows(registry) == before
    assert sorted(p.name for p in (maya_home / "estimators").iterdir()) == ["v1"]


@pytest.mark.slow
def test_explicit_warehouse_path(measured, tmp_path):
    registry = Registry(tmp_path / "elsewhere" / "wh.duckdb")
    record = train_version(measured, SMALL, registry).record
    assert (tmp_path / "elsewhere" / "estimators" / record.version / "model.zip").is_file()
    assert isinstance(registry.load(record.version).predict(measured.head(3)), pd.DataFrame)


@pytest.mark.slow
def test_artifact_round_trip_keeps_floors_and_predictions(measured):
    from maya.estimators import train
    from maya.estimators.artifact import dumps, loads

    estimator = train(measured, SMALL).estimator
    loaded = loads(dumps(estimator))
    for family, models in estimator.models.items():
        assert models.floors.by_op and loaded.models[family].floors == models.floors
    calls = measured.head(50).assign(m=lambda d: d["m"] + 5, row=lambda d: d["row"] + 5)  # not looked up
    pd.testing.assert_frame_equal(loaded.predict(calls), estimator.predict(calls))


@pytest.mark.slow
def test_changed_estimator_code_trains_a_new_version(measured, monkeypatch):
    """Same data and configuration, other code (e.g. an upgraded Maya): the old version is not reused."""
    from maya.estimators import training

    first = train_version(measured, SMALL)
    monkeypatch.setattr(training, "code_digest", lambda: "other code")
    again = train_version(measured, SMALL)
    assert not again.reused and again.record.version == "v2" and again.record.config_hash != first.record.config_hash


@pytest.mark.slow
def test_reads_wait_for_another_process_writing(measured, tmp_path):
    """A reader (a validation worker's `maya predict`) waits while another process holds the warehouse's
    write lock (the suite storing a row) instead of failing."""
    registry = Registry(tmp_path / "w.duckdb")
    train_version(measured.head(200), SMALL, registry)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                "time.sleep(1.5); con.close()"
            ),
            str(registry.warehouse),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert registry.latest() == "v1"
    finally:
        holder.wait(timeout=30)


def test_a_saved_model_this_xgboost_cannot_read_is_an_artifact_error_when_first_used():
    """Models are parsed on first use: bytes XGBoost cannot read fail with an error that says so."""
    from maya.estimators.efficiency_model import Band, EfficiencyModel, ModelFormatError

    model = EfficiencyModel.from_bytes(b"not a model", ("x",), Band(0.0, 0.0))
    with pytest.raises(ModelFormatError, match="cannot be read by this XGBoost"):
        _ = model.booster
