"""`folder_made_once`: one folder whoever races to make it, and the folders it supersedes removed unless another
process is making them."""

import fcntl
import multiprocessing
import time
from pathlib import Path

import pytest

from maya.core.paths import folder_made_once


def _make_slowly(log: Path):
    """A maker that logs each call and takes long enough for a racing process to arrive while it runs."""

    def make(partial: Path) -> None:
        with open(log, "a") as f:
            f.write("made\n")
        partial.mkdir()
        time.sleep(0.5)
        (partial / "marker").write_text("whole")

    return make


def _race(path: Path, log: Path, start, results) -> None:
    start.wait()
    results.put(str(folder_made_once(path, "marker", _make_slowly(log))))


@pytest.mark.slow
def test_two_racing_processes_make_one_folder(tmp_path):
    path, log = tmp_path / "cache" / "thing", tmp_path / "log"
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(2), context.Queue()
    racers = [context.Process(target=_race, args=(path, log, start, results)) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=30)
    assert [racer.exitcode for racer in racers] == [0, 0]
    assert [results.get(timeout=1) for _ in racers] == [str(path)] * 2
    assert log.read_text() == "made\n"  # the second waited on the lock and reused the first's folder
    assert (path / "marker").read_text() == "whole"
    assert sorted(p.name for p in path.parent.iterdir()) == [".thing.lock", "thing"]  # no partial left


@pytest.mark.slow
def test_superseded_folders_are_removed_unless_another_process_is_making_them(tmp_path):
    cache = tmp_path / "cache"
    for name in ("copy-old", "other-keep"):
        (cache / name).mkdir(parents=True)
    (cache / ".copy-killed.partial").mkdir()  # a SIGKILLed maker's leftovers
    (cache / ".copy-busy.partial").mkdir()  # being made right now: its lock is held
    with open(cache / ".copy-busy.lock", "w") as busy:
        fcntl.flock(busy, fcntl.LOCK_EX)
        made = folder_made_once(cache / "copy-new", "marker", _make_slowly(tmp_path / "log"), replaces="copy-*")
    assert made == cache / "copy-new" and (made / "marker").is_file()
    folders = sorted(p.name for p in cache.iterdir() if p.is_dir())
    assert folders == [".copy-busy.partial", "copy-new", "other-keep"]


def test_a_folder_already_made_removes_nothing(tmp_path):
    cache = tmp_path / "cache"
    (cache / "copy-new").mkdir(parents=True)
    (cache / "copy-new" / "marker").write_text("whole")
    (cache / "copy-old").mkdir()
    folder_made_once(cache / "copy-new", "marker", _make_slowly(tmp_path / "log"), replaces="copy-*")
    assert (cache / "copy-old").is_dir() and not (tmp_path / "log").exists()
