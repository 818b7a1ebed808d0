"""The zygote that forks emulated ranks (collectors/emulator/forkserver.py)."""

import os
import re
from pathlib import Path

import pytest
from paths import EXAMPLE, WORKLOADS

from maya.emulator import forkserver
from maya.emulator.launcher import Topology, emulate
from maya.search.evaluate import trace_digest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(autouse=True)
def no_zygote_left():
    """Each test starts without the zygote an earlier test's emulation kept, and leaves none."""
    forkserver._close_all()
    yield
    forkserver._close_all()


def _emulate(out: Path, script: Path, ranks: int = 1):
    return emulate([str(script)], out, topology=Topology(1, ranks), dedup=False)


def _zygote_pids() -> set[int]:
    server = forkserver.current()
    return {server.proc.pid} if server and server.alive else set()


def test_a_forked_rank_captures_what_a_new_process_captures(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_EMU_FORKSERVER", "0")
    spawned = _emulate(tmp_path / "spawned", EXAMPLE)
    assert not _zygote_pids()
    monkeypatch.setenv("MAYA_EMU_FORKSERVER", "1")
    forked = _emulate(tmp_path / "forked", EXAMPLE)
    assert len(_zygote_pids()) == 1
    assert spawned.status == forked.status == "complete"
    assert spawned.ranks[0].calls == forked.ranks[0].calls > 400
    assert trace_digest(spawned.run_dir) == trace_digest(forked.run_dir)


def test_a_script_sets_inductor_switches_before_importing_torch_as_in_a_new_process(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_EMU_FORKSERVER", "1")
    result = _emulate(tmp_path / "run", WORKLOADS / "inductor_env_in_script.py")
    assert result.status == "complete"
    assert "max_autotune=True" in (result.run_dir / "logs" / "rank0.txt").read_text()


def test_ranks_get_their_environment_and_the_zygote_follows_it(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MAYA_TEST_EXTRA", "first")
    first = _emulate(tmp_path / "first", WORKLOADS / "rank_environment.py", ranks=2)
    assert first.status == "complete"
    seen = {}
    for rank in (0, 1):
        log = (first.run_dir / "logs" / f"rank{rank}.txt").read_text()
        assert f"rank={rank} world=2 cwd={cwd} extra=first stdin_tty=False stdin_eof=True" in log
        seen[rank] = re.search(r"py_random=(\S+) np_random=(\S+)", log).groups()
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]  # seeded apart, as new processes are
    zygote = _zygote_pids()
    assert len(zygote) == 1
    old = forkserver.current()

    again = _emulate(tmp_path / "again", WORKLOADS / "rank_environment.py")
    assert again.status == "complete"
    assert _zygote_pids() == zygote  # same environment: the same zygote

    monkeypatch.setenv("MAYA_TEST_EXTRA", "second")  # the rank's own: read after the fork
    monkeypatch.setenv("MAYA_TEST_EXIT", "3")
    changed = _emulate(tmp_path / "changed", WORKLOADS / "rank_environment.py")
    assert "extra=second" in (changed.run_dir / "logs" / "rank0.txt").read_text()
    assert (changed.status, changed.ranks[0].exit_code) == ("failed", 3)
    assert _zygote_pids() == zygote

    monkeypatch.setenv("TORCH_MAYA_TEST", "1")  # torch may read TORCH_* when imported: another zygote
    monkeypatch.delenv("MAYA_TEST_EXIT")
    assert _emulate(tmp_path / "torch_env", WORKLOADS / "rank_environment.py").status == "complete"
    assert len(_zygote_pids()) == 1 and _zygote_pids() != zygote and not old.alive  # replaced, the old one ended

    forkserver._close_all()
    assert not _zygote_pids()
    assert list(cwd.iterdir()) == []  # neither the zygote nor a rank wrote into the working directory


def test_without_a_zygote_ranks_start_as_new_processes(tmp_path, monkeypatch):
    def unavailable(self, env):
        raise forkserver.ZygoteUnavailable("the emulator's zygote did not start (exit 1)")

    monkeypatch.setattr(forkserver.ForkServer, "__init__", unavailable)
    with pytest.warns(RuntimeWarning, match="zygote did not start.*new processes"):
        result = _emulate(tmp_path / "run", WORKLOADS / "rank_environment.py")
    assert result.status == "complete" and result.ranks[0].calls > 0
    assert not _zygote_pids()


def test_a_replaced_zygote_ends_only_once_its_ranks_have(monkeypatch):
    class Zygote:  # stands in for the process: lease's bookkeeping is what is checked
        def __init__(self, env):
            self.env, self.closed, self.active, self.retired = env, False, 0, False

        alive = property(lambda self: not self.closed)

        def close(self):
            self.closed = True

    monkeypatch.setattr(forkserver, "ForkServer", Zygote)
    with forkserver.lease({"TORCH_X": "1", "RANK": "0", "STEPS": "2"}) as first:
        with forkserver.lease({"TORCH_X": "1", "RANK": "1", "STEPS": "3"}) as same:
            assert same is first  # per-rank and other run-time variables do not make another zygote
        with forkserver.lease({"TORCH_X": "2", "RANK": "0"}) as second:
            assert second is not first and not first.closed  # first still runs a rank
        assert not first.closed
    assert first.closed and not second.closed
    with forkserver.lease({"TORCH_X": "2", "RANK": "5"}) as again:
        assert again is second


def test_a_prestarted_zygote_is_the_one_a_rank_leases(monkeypatch):
    started = []

    class Zygote:  # stands in for the process: which zygote each call gets is what is checked
        def __init__(self, env):
            self.env, self.closed, self.active, self.retired = env, False, 0, False
            started.append(self)

        alive = property(lambda self: not self.closed)

        def close(self):
            self.closed = True

    monkeypatch.setattr(forkserver, "ForkServer", Zygote)
    forkserver.prestart({"TORCH_X": "1", "RANK": "0"})
    assert len(started) == 1 and started[0].active == 0  # started, not held
    with forkserver.lease({"TORCH_X": "1", "RANK": "1"}) as zygote:
        assert zygote is started[0]
    forkserver.prestart({"TORCH_X": "1", "SYMPY_USE_CACHE": "no"})  # SymPy's switches are read by its preload
    assert len(started) == 2 and started[0].closed


def test_a_zygote_that_does_not_start_is_reported_at_its_first_rank():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # without the stubs it exits before "ready"
    server = forkserver.ForkServer(env)  # returns at once: the zygote imports while its starter goes on
    with pytest.raises(forkserver.ZygoteUnavailable, match="did not start"):
        server.run(["-c", "pass"], env, lambda line: None)
    server.close()
