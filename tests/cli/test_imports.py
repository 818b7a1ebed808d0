"""The CLI's start-up cost stays bounded: a command imports only what it uses (issue 30).

Each check runs in a fresh interpreter and reads `sys.modules`, so an eager import added anywhere on the
path fails it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maya.estimators import Registry, TrainConfig, train
from maya.estimators.efficiency_model import ModelParams
from maya.estimators.training_data import load_kernels, neusight_dir
from maya.simulator.trace_builder import TraceBuilder

HEAVY = ("torch", "dagster", "ray", "plotly", "sklearn", "scipy", "xgboost", "pandas", "pyarrow", "duckdb")
"""Packages `maya --help` must not import."""
TRAINING = ("torch", "dagster", "ray", "plotly", "sklearn", "xgboost")
"""Packages the simulator's predict path must not import before an estimator artifact is loaded."""
UNUSED = ("torch", "dagster", "ray", "plotly", "sklearn", "scipy.stats")
"""Packages a whole `maya predict` with estimators and its band must not import: XGBoost would import
scikit-learn (and SciPy's stats) for an interface Maya does not use; the band's draws need no scipy.stats."""


def imported(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` are in `sys.modules` after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(n for n in {names!r} if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.slow
def test_cli_entry_imports_no_heavy_package():
    assert imported("import maya.cli", HEAVY) == []


@pytest.mark.slow
def test_predict_path_imports_no_training_stack():
    """The predict command's modules import no training stack (XGBoost comes with the artifact it reads)."""
    code = "import maya.api, maya.simulator.predict, maya.simulator.band, maya.estimators.calls"
    assert imported(code, TRAINING) == []


@pytest.mark.slow
def test_predict_help_imports_no_heavy_package():
    code = (
        "import contextlib, io\nfrom maya.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()): app(['predict', '--help'], standalone_mode=False)"
    )
    assert imported(code, HEAVY) == []


@pytest.mark.slow  # trains a small estimator
def test_predict_with_estimators_and_band_imports_only_what_it_uses(tmp_path):
    """A whole `maya predict` priced by a registered estimator, band included, loads XGBoost but none of `UNUSED`."""
    measured = load_kernels(neusight_dir() / "kernels_train.parquet").sample(2000, random_state=1)
    small = TrainConfig(params=ModelParams(n_estimators=10, max_depth=3), validate=False)
    warehouse = tmp_path / "warehouse.duckdb"
    Registry(warehouse).register(train(measured, small).estimator, data_hash="d", config_hash="c", metrics={})
    b = TraceBuilder(world_size=1, nproc_per_node=1)
    k = b.rank(0)
    for iteration in range(4):
        k.iteration = iteration
        for _ in range(3):
            k.gemm(4096, 4096, 1024, 1)
        k.stream_sync()
    run = b.write(tmp_path / "run")
    argv = ["predict", str(run), "--warehouse", str(warehouse), "--durations", "estimators", "--json"]
    code = (
        "import contextlib, io, json\nfrom maya.cli import app\nout = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out): app({argv!r}, standalone_mode=False)\n"
        "assert json.loads(out.getvalue())['band'] is not None"
    )
    assert imported(code, UNUSED + ("xgboost",)) == ["xgboost"]
