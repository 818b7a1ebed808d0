"""The CLI's start-up cost stays bounded: a command imports only what it uses (issue 30).

Each check runs in a fresh interpreter and reads `sys.modules`, so an eager import added anywhere on the
path fails it."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "dagster", "ray", "plotly", "sklearn", "scipy", "xgboost", "pandas", "pyarrow", "duckdb")
"""Packages `maya --help` must not import."""
TRAINING = ("torch", "dagster", "ray", "plotly", "sklearn", "xgboost")
"""Packages the simulator's predict path must not import before an estimator artifact is loaded."""


def imported(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` are in `sys.modules` after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(n for n in {names!r} if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_cli_entry_imports_no_heavy_package():
    assert imported("import maya.cli", HEAVY) == []


def test_predict_path_imports_no_training_stack():
    """The predict command's modules import no training stack (XGBoost comes with the artifact it reads)."""
    code = "import maya.api, maya.simulator.predict, maya.simulator.band, maya.estimators.calls"
    assert imported(code, TRAINING) == []
