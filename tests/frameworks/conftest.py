"""Framework runs: each test emulates a real framework's own entry point, unchanged."""

import json

import pytest
from typer.testing import CliRunner

from maya.cli.app import app


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
