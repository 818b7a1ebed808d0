"""Framework runs: each test emulates a real framework's own entry point, unchanged."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maya.cli.app import app
from maya.core import settings


@pytest.fixture
def megatron_checkout() -> Path:
    """The Megatron-LM checkout `MAYA_MEGATRON_LM` names; skips without one or under Python < 3.12."""
    path = Path(settings.MEGATRON_LM.get() or "")
    if sys.version_info < (3, 12) or not (path / "pretrain_gpt.py").is_file():
        pytest.skip("set MAYA_MEGATRON_LM to a Megatron-LM checkout, under Python 3.12")
    return path


@pytest.fixture
def megatron_checkout_te(megatron_checkout: Path) -> Path:
    """`megatron_checkout`, skipping also without Transformer Engine."""
    if importlib.util.find_spec("transformer_engine") is None:
        pytest.skip("Transformer Engine is not installed (PYTHON=python3.12 MAYA_WITH_TE=1 scripts/setup)")
    return megatron_checkout


@pytest.fixture
def emulate_and_predict(monkeypatch):
    """`emulate_and_predict(out, argv, *options, cwd=None, predict=True)`: `maya emulate OPTIONS -- ARGV` (in
    `cwd`), then `maya predict --durations roofline --json`; returns (emulate's output, the prediction or None)."""
    runner = CliRunner()

    def run(out, argv, *options, cwd=None, predict=True):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        r = runner.invoke(app, ["emulate", "--out", str(out), *options, "--", *argv])
        assert r.exit_code == 0, r.output
        assert "unimplemented" not in r.output.lower().replace("unimplemented apis", "")
        if not predict:
            return r.output, None
        p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
        assert p.exit_code == 0, p.output
        return r.output, json.loads(p.stdout)

    return run
