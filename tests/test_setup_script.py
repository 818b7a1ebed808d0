"""`scripts/setup` refuses to set up an existing `.venv` of another Python than `PYTHON` names (it would install Maya,
and build Transformer Engine's extension, for the wrong one), naming both versions; it marks the `.venv` as Maya's own
environment, and with `MAYA_WITH_TE=1` runs Transformer Engine's installer there."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fake_python(path: Path, version: str) -> Path:
    """An executable that answers the setup's version query as Python `version` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def test_setup_refuses_a_venv_of_another_python(tmp_path):
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    fake_python(tmp_path / ".venv" / "bin" / "python", "3.11")
    wanted = fake_python(tmp_path / "py312" / "python3.12", "3.12")
    r = subprocess.run(
        [str(tmp_path / "scripts" / "setup")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(wanted)},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert f"PYTHON={wanted} is Python 3.12 but .venv holds Python 3.11" in r.stderr


def recording(path: Path, log: Path, answer: str = "") -> Path:
    """An executable that appends its arguments to `log` and prints `answer`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {log}\necho {answer}\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("with_te", [False, True])
def test_setup_marks_maya_s_environment_and_runs_the_te_installer_when_asked(tmp_path, with_te):
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    log = tmp_path / "calls"
    for name in ("python", "uv", "maya"):
        recording(tmp_path / ".venv" / "bin" / name, log, "maya 0.1.0" if name == "maya" else "")
    env = {"PATH": "/usr/bin:/bin", **({"MAYA_WITH_TE": "1"} if with_te else {})}
    r = subprocess.run([str(tmp_path / "scripts" / "setup")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / ".venv" / "maya-environment").is_file()  # what maya.installer.transformer_engine looks for
    calls = log.read_text().splitlines()
    assert ("python -m maya.installer.transformer_engine" in calls) is with_te
