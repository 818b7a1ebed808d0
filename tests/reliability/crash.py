"""Crash safety: a writer killed (SIGKILL) at random points leaves what it stores either as it was or as an
uninterrupted run leaves it, readable, and the next run resumes to the uninterrupted result.

A `Scenario` names its writer and how to read what it stores:

- `prepare(root)`: the state before the write (files, a warehouse), built once and copied for every trial;
- `write(root)`: the writer under test — killed at a random point in a trial, run again to resume;
- `state(root)`: what is stored, read the way Maya reads it, as a comparable value; it raises if anything
  stored cannot be read (which counts as corruption);
- `allowed(state, old, new)`: whether a state after a kill is acceptable (default: `old` or `new`; writers
  that commit step by step, like the search log, accept the steps in between).

Every step runs in a child forked from this (preloaded) process, so a trial costs milliseconds of fork and no
interpreter start. Kill points are drawn two ways: `event` — SIGKILL at the k-th Python call/return (C calls
included) of the write, k uniform over an uninterrupted write's count; `timer` — SIGKILL from the parent after
a random delay up to an uninterrupted write's wall time, which lands inside C code (a Parquet write, a DuckDB
commit). To cover another writer, add a `Scenario` to `scenarios()`: the test and the benchmark pick it up.
"""

from __future__ import annotations

import faulthandler
import importlib
import multiprocessing
import os
import pickle
import random
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD_TIMEOUT_S = 120.0


class ChildFailed(Exception):
    """A step in a child process raised (the message carries its error) or did not finish."""


@dataclass
class Scenario:
    name: str
    prepare: Callable[[Path], None]
    write: Callable[[Path], None]
    state: Callable[[Path], Any]
    allowed: Callable[[Any, Any, Any], bool] = lambda state, old, new: state == old or state == new
    leftovers: Callable[[Path], int] = lambda root: 0
    """Temporary files or directories a kill left behind (not corruption: readers ignore them)."""
    modules: tuple[str, ...] = ()
    """Imported in the parent before any fork, so that no child pays for the import."""


@dataclass
class CrashTally:
    scenario: str
    trials: int = 0
    killed: int = 0
    """Trials whose writer was killed before it finished."""
    corrupt: int = 0
    """States neither old nor new (or unreadable) after a kill: data lost or corrupted."""
    not_resumed: int = 0
    """Resumed runs whose stored result differs from the uninterrupted one."""
    hangs: int = 0
    leftovers: int = 0
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    def problem(self, what: str, detail: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        if len(self.examples) < 5:
            self.examples.append(f"{what}: {detail}"[:500])


def in_child(
    fn: Callable[[], Any],
    *,
    kill_at_event: int | None = None,
    kill_after_s: float | None = None,
    count_events: bool = False,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> tuple[str, Any]:
    """Run `fn()` in a forked child: ("ok", value), ("killed", None), ("error", message) or ("hang", None).
    `count_events`: the value is (fn's value, Python call events during it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            faulthandler.dump_traceback_later(max(1.0, timeout_s - 2), file=sys.stderr)  # where a hang is
            events = [0]
            if kill_at_event is not None or count_events:

                def profile(frame, event, arg):
                    events[0] += 1
                    if events[0] == kill_at_event:
                        os.kill(os.getpid(), signal.SIGKILL)

                threading.setprofile(profile)
                sys.setprofile(profile)
            try:
                value = fn()
                payload = ("ok", (value, events[0]) if count_events else value)
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                payload = ("error", f"{type(e).__name__}: {e}")
            sys.setprofile(None)
            with os.fdopen(write, "wb") as out:
                pickle.dump(payload, out)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    started = time.monotonic()
    deadline = started + timeout_s
    kill_at = None if kill_after_s is None else started + kill_after_s
    chunks, killed = [], False
    with os.fdopen(read, "rb") as pipe:
        while True:
            now = time.monotonic()
            if kill_at is not None and not killed and now >= kill_at:
                os.kill(pid, signal.SIGKILL)
                killed = True
            until = deadline if killed or kill_at is None else min(deadline, kill_at)
            if not select.select([pipe], [], [], max(0.0, until - now))[0]:
                if time.monotonic() >= deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return "hang", None
                continue
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed", None
    if not chunks:
        return "error", f"the child ended with status {status} and no answer"
    return pickle.loads(b"".join(chunks))


def _must(step: str, result: tuple[str, Any]) -> Any:
    kind, value = result
    if kind != "ok":
        raise ChildFailed(f"{step}: {kind} {value or ''}")
    return value


def kill_trials(scenario: Scenario, trials: int, seed: int = 0, workdir: Path | None = None) -> CrashTally:
    """`trials` kills of `scenario`'s writer at random points (half by event count, half by timer)."""
    for module in scenario.modules:
        importlib.import_module(module)
    rng = random.Random(seed)
    tally = CrashTally(scenario.name)
    t0 = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix=f"maya-crash-{scenario.name.replace(' ', '-')}-", dir=workdir))
    try:
        base = root / "base"
        base.mkdir()
        _must("prepare", in_child(lambda: scenario.prepare(base)))
        old = _must("state before", in_child(lambda: _rooted(scenario.state(base), base)))
        reference = root / "reference"
        shutil.copytree(base, reference, symlinks=True)
        w0 = time.monotonic()
        _, events = _must("uninterrupted write", in_child(lambda: scenario.write(reference), count_events=True))
        wall = time.monotonic() - w0
        new = _must("state after", in_child(lambda: _rooted(scenario.state(reference), reference, base)))
        if old == new:
            raise ChildFailed(f"{scenario.name}: the write changes nothing it stores; the scenario tests nothing")
        for i in range(trials):
            trial = root / f"trial{i}"
            shutil.copytree(base, trial, symlinks=True)
            if i % 2 == 0:
                result = in_child(lambda: scenario.write(trial), kill_at_event=rng.randint(1, max(1, events)))
            else:
                result = in_child(lambda: scenario.write(trial), kill_after_s=rng.uniform(0, wall))
            tally.trials += 1
            if result[0] == "hang":
                tally.problem("hangs", f"trial {i}: the writer did not finish")
                continue
            if result[0] == "error":
                tally.problem("corrupt", f"trial {i}: the writer failed: {result[1]}")
                continue
            tally.killed += result[0] == "killed"
            kind, state = in_child(lambda: _rooted(scenario.state(trial), trial, base))
            if kind != "ok":
                tally.problem("corrupt", f"trial {i}: what is stored cannot be read after the kill: {kind} {state}")
            elif not scenario.allowed(state, old, new):
                tally.problem(
                    "corrupt",
                    f"trial {i}: stored state after the kill is neither old nor new: {_diff(state, old, new)}",
                )
            tally.leftovers += scenario.leftovers(trial)
            kind, err = in_child(lambda: scenario.write(trial))
            if kind != "ok":
                tally.problem("not_resumed", f"trial {i}: the next run failed: {kind} {err}")
                continue
            kind, resumed = in_child(lambda: _rooted(scenario.state(trial), trial, base))
            if kind != "ok" or resumed != new:
                tally.problem("not_resumed", f"trial {i}: resumed to {_diff(resumed, old, new)}")
            shutil.rmtree(trial, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        tally.seconds = time.perf_counter() - t0
    return tally


def _rooted(value: Any, *roots: Path) -> Any:
    """`value` with the directories of the copy and of the state it was copied from written `ROOT`, so states
    of copies compare equal (what a copy stored earlier names the original's paths)."""
    if isinstance(value, str):
        for root in roots:
            value = value.replace(str(root), "ROOT")
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_rooted(v, *roots) for v in value)
    if isinstance(value, dict):
        return {_rooted(k, *roots): _rooted(v, *roots) for k, v in value.items()}
    return value


def _diff(state: Any, old: Any, new: Any) -> str:
    return f"{state!r:.150} (old {old!r:.100}, new {new!r:.100})"


def fresh_parent() -> ProcessPoolExecutor:
    """A fresh interpreter to fork the trials from (`kill_trials_fresh`): it only imports the scenarios' modules
    and forks, running none of their code, so one serves every scenario in turn (each start costs an interpreter
    and the imports)."""
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


def kill_trials_fresh(
    name: str, trials: int, seed: int = 0, workdir: Path | None = None, parent: ProcessPoolExecutor | None = None
) -> CrashTally:
    """`kill_trials` of the scenario named `name`, forking from a fresh interpreter (`parent`, else a new
    `fresh_parent()`) rather than this process: after a process has run OpenMP (XGBoost) or torch threads, a
    forked child that uses them again can crash (libgomp is not fork-safe), so a long-lived test process must not
    be the parent."""
    if parent is None:
        with fresh_parent() as own:
            return kill_trials_fresh(name, trials, seed, workdir, own)
    return parent.submit(_named_trials, name, trials, seed, workdir).result()


def _named_trials(name: str, trials: int, seed: int, workdir: Path | None) -> CrashTally:
    from .crash_scenarios import scenarios

    return kill_trials(next(s for s in scenarios() if s.name == name), trials, seed, workdir)
