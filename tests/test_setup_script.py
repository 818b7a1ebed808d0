"""`scripts/setup` refuses to set up an existing `.venv` of another Python than `PYTHON` names (it would install Maya,
and build Transformer Engine's extension, for the wrong one), naming both versions."""

import shutil
import subprocess
from pathlib import Path

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
