"""`maya estimators`: train, list, show, eval (MAPE checked by hand) and clear errors."""

import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from maya.cli import app
from maya.estimators import Registry
from maya.estimators.training_data import neusight_dir

pytestmark = pytest.mark.slow  # trains estimator versions

runner = CliRunner()
TRAIN = ("estimators", "train", "--sample", "2000", "--trees", "10", "--depth", "3")


def maya(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def trained():
    r = maya(*TRAIN)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def test_rows():
    return pd.read_parquet(neusight_dir() / "kernels_test.parquet")


def test_train_list_show(trained):
    assert "registered estimator version v1" in trained.stdout
    again = maya(*TRAIN)
    assert again.exit_code == 0 and "reused estimator version v1" in again.stdout
    listing = maya("estimators", "list")
    assert listing.exit_code == 0 and "v1 (latest)" in listing.stdout
    shown = maya("estimators", "show", "latest")
    record = Registry().get("v1")
    assert shown.exit_code == 0 and record.artifact_sha256[:16] in shown.stdout and "gemm" in shown.stdout
    references = Registry().gemm_references("v1")
    assert references.learned_from and all("vidur" in names for names in references.learned_from.values())
    text = words(shown.stdout)
    assert "tensor-core GEMMs learned from" in text
    for reference in references.references:  # the shipped rows' sample: Vidur's GEMMs on the A100 and H100
        assert f"{reference.part}: {reference.ratio:.3f}" in text


def test_list_and_show_say_a_version_of_ones_own_measurements_has_no_gemm_reference():
    """Trained on a user's own A100 GEMMs only: the listing's GEMM reference column says none and `show` says why."""
    from maya.estimators import TrainConfig, train_version
    from maya.estimators.efficiency_model import ModelParams

    sizes = [(m, n, 8192.0) for m in (2048.0, 4096.0, 8192.0) for n in (1024.0, 2048.0, 4096.0, 8192.0)]
    mine = pd.DataFrame(sizes * 2, columns=["m", "n", "k"]).assign(
        hardware="a100-sxm-80gb", family="gemm", op="mm", dtype="bf16", source="profiles:mine"
    )
    mine["measured_ns"] = 2 * mine["m"] * mine["n"] * mine["k"] / 250e12 * 1e9
    train_version(mine, TrainConfig(params=ModelParams(n_estimators=5, max_depth=2), validate=False))
    listing = maya("estimators", "list")
    (row,) = [words(line) for line in listing.stdout.splitlines() if words(line).startswith("v1 ")]
    assert listing.exit_code == 0 and row.endswith(" none")  # the GEMM reference column, the last
    shown = words(maya("estimators", "show", "v1").stdout)
    assert "GEMM references none" in shown
    assert "the tensor-core GEMMs were learned from profiles:mine, not vidur" in shown
    assert "tensor-core GEMMs learned from a100-sxm-80gb: profiles:mine" in shown


def words(text: str) -> str:
    """A rich table's text as its words, cell borders left out (cells wrap at the terminal's width)."""
    return " ".join(text.replace("│", " ").split())


def test_eval_mape_matches_a_hand_computation(trained, test_rows, tmp_path):
    rows = test_rows[test_rows["op"] == "bmm"].head(3)
    dataset = tmp_path / "three.parquet"
    rows.to_parquet(dataset)
    r = maya("estimators", "eval", "--dataset", dataset, "--estimator-version", "v1")
    assert r.exit_code == 0, r.output
    # NeuSight's bmm is [m, n] x [n, k] row-major: in the call frame's (cuBLAS) sizes m = its k, n = its m
    calls = pd.DataFrame(
        {
            "hardware": rows["device"],
            "family": "gemm",
            "op": "bmm",
            "dtype": "fp32",
            "batch": rows["b"],
            "m": rows["k"],
            "n": rows["m"],
            "k": rows["n"],
        }
    )
    predicted = Registry().load("v1").predict(calls)["isolated_ns"].to_numpy()  # NeuSight timed calls alone
    measured = rows["latency_ms"].to_numpy() * 1e6
    by_hand = sum(abs(p - m) / m for p, m in zip(predicted, measured)) / 3
    overall = re.search(r"overall\s*│\s*3\s*│\s*([\d.]+)%", r.stdout)
    assert overall and float(overall.group(1)) == pytest.approx(100 * by_hand, abs=0.05)
    assert re.search(r"bmm\s*│\s*3\s*│", r.stdout)


def test_eval_errors(trained, test_rows, tmp_path):
    unknown = tmp_path / "unknown.parquet"
    test_rows.head(2).assign(device="NVIDIA H300").to_parquet(unknown)
    r = maya("estimators", "eval", "--dataset", unknown)
    assert r.exit_code == 1 and "unknown device 'NVIDIA H300'" in r.stderr
    missing = tmp_path / "missing.parquet"
    test_rows.head(2).drop(columns=["latency_ms"]).to_parquet(missing)
    r = maya("estimators", "eval", "--dataset", missing)
    assert r.exit_code == 1 and "missing column(s) latency_ms" in r.stderr  # the closest layout, NeuSight's
    good = tmp_path / "good.parquet"
    test_rows.head(2).to_parquet(good)
    r = maya("estimators", "eval", "--dataset", good, "--estimator-version", "v7")
    assert r.exit_code == 1 and "unknown estimator version 'v7'" in r.stderr
    r = maya("estimators", "eval", "--dataset", tmp_path / "nope.parquet")
    assert r.exit_code == 1 and "no such file" in r.stderr


def test_show_and_eval_without_versions(test_rows, tmp_path):
    r = maya("estimators", "show", "v1")
    assert r.exit_code == 1 and "none registered yet" in r.stderr
    assert "no estimator versions" in maya("estimators", "list").stdout


def test_eval_kernels_public_per_gpu_implementation_and_direction(trained, tmp_path):
    import json

    from maya.estimators.kernels_public_data import FILES, kernels_public_dir

    r = maya("estimators", "eval", "--dataset", "kernels-public", "--json")
    assert r.exit_code == 0, r.output
    table = json.loads(r.stdout)
    assert table["h100-sxm/FlashAttention-2/fwd+bwd"]["rows"] == 24
    # the implementation as published may hold a slash ("torch.mm (cuBLAS/cuBLASLt)"): GPU first, direction last
    assert all(key.rsplit("/", 1)[1] in ("fwd", "bwd", "fwd+bwd", "gemm") for key in table)
    assert {key.split("/")[0] for key in table} <= {"a100-sxm-80gb", "a100-pcie-40gb", "h100-sxm", "h200", "h800"}
    assert all(set(v) == {"rows", "mape"} for v in table.values())
    figures = pd.read_csv(kernels_public_dir() / FILES[0], dtype=str, keep_default_na=False)
    one = tmp_path / "one.csv"
    figures[figures["kernel_impl"] == "xformers"].head(2).to_csv(one, index=False)
    r = maya("estimators", "eval", "--dataset", one, "--json")
    assert r.exit_code == 0 and list(json.loads(r.stdout)) == ["a100-sxm-80gb/xformers/fwd+bwd"]
    figures.drop(columns="licence").to_csv(one, index=False)
    r = maya("estimators", "eval", "--dataset", one)
    assert r.exit_code == 1 and "missing column(s) licence" in r.stderr
