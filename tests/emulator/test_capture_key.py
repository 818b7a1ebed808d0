"""The capture cache's key covers the emulator and every Maya module it imports (deduplication's stage rebuild in
`maya.core` shapes a capture as much as the emulator's own files do)."""

from __future__ import annotations

from pathlib import Path

import pytest

import maya
from maya.emulator import capture_cache


def _module(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_imports_followed_absolute_relative_and_nested(tmp_path: Path) -> None:
    package = tmp_path / "maya"
    _module(package, "__init__.py", "")
    _module(package, "core/__init__.py", "")
    _module(package, "core/stages.py", "from .digest import files_digest\n")
    _module(package, "core/digest.py", "import hashlib\n")
    _module(package, "core/unused.py", "")
    _module(package, "simulator/program.py", "")
    emulator = _module(
        package,
        "emulator/dedup.py",
        "from maya.core import stages\nfrom .sibling import x\n\ndef f():\n    import maya.simulator.program\n",
    )
    _module(package, "emulator/sibling.py", "from maya.core.settings import SWITCHES\n")
    found = capture_cache.imported_outside([emulator, package / "emulator/sibling.py"], package, package / "emulator")
    names = sorted(str(path.relative_to(package)) for path in found)
    assert names == ["__init__.py", "core/__init__.py", "core/digest.py", "core/stages.py", "simulator/program.py"]


@pytest.mark.slow
def test_the_key_covers_the_stage_rebuild() -> None:
    package = Path(maya.__file__).parent
    emulator = package / "emulator"
    found = capture_cache.imported_outside(sorted(emulator.rglob("*.py")), package, emulator)
    assert package / "core" / "pipeline_stages.py" in found
    assert not any(emulator in path.parents for path in found)
