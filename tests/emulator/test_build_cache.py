"""The stub build cache shared by processes (pytest-xdist workers, two `maya emulate` at once): one builds, the
others wait for it and reuse its build."""

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from maya.emulator import build


@pytest.mark.slow
def test_concurrent_builds_of_one_key_compile_once(tmp_path, monkeypatch):
    compiled = []

    def slow_build(final: Path, key: str, cc: str, cxx: str) -> None:
        compiled.append(key)
        time.sleep(0.5)  # long enough for every other caller to arrive while this one builds
        tmp = final.parent / f".build-{len(compiled)}"
        tmp.mkdir()
        (tmp / ".complete").write_text(key)
        tmp.rename(final)

    monkeypatch.setattr(build, "build_key", lambda cc, cxx: "key")
    monkeypatch.setattr(build, "_build_into", slow_build)
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(4) as pool:  # each call opens the lock file itself, as another process would
        dirs = list(pool.map(lambda _: build.build(cache), range(4)))
    assert dirs == [cache / "key"] * 4
    assert compiled == ["key"]
    assert (cache / "key" / ".complete").read_text() == "key"


def test_one_interpreter_reached_by_two_paths_has_one_build_key(monkeypatch):
    python = Path(sys.executable)
    keys = set()
    for spelling in (str(python), str(python.parent / ".." / python.parent.name / python.name)):
        monkeypatch.setattr(sys, "executable", spelling)  # as `../.venv/bin/python script.py` gives it
        keys.add(build.build_key("gcc", "g++"))
    assert len(keys) == 1
