"""Paths the tests share: the checkout, the test workloads and fixtures, shipped data and the example."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SRC = REPO / "src"
WORKLOADS = TESTS / "workloads"
"""Small training scripts the tests emulate or profile."""
FIXTURES = TESTS / "fixtures"
SHIPPED_WORKLOADS = SRC / "maya" / "data" / "workloads"
"""The reference workloads and the ground-truth suite shipped with Maya."""
EXAMPLE = SRC / "maya" / "examples" / "train_gpt.py"
PROFILER_RUNNER = SRC / "maya" / "profiler" / "run_on_device.py"
