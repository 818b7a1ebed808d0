"""Framework runs: each test emulates a real framework's own entry point, unchanged."""
import json

from typer.testing import CliRunner

from maya.cli.app import app

runner = CliRunner()


def emulate_and_predict(out, argv, *options, cwd=None, monkeypatch=None):
    """`maya emulate OPTIONS -- ARGV` then `maya predict --durations roofline --json`; returns
    (emulate's output, the prediction)."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    r = runner.invoke(app, ["emulate", "--out", str(out), *options, "--", *argv])
    assert r.exit_code == 0, r.output
    assert "unimplemented" not in r.output.lower().replace("unimplemented apis", "")
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    return r.output, json.loads(p.stdout)
