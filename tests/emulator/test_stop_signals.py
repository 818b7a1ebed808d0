"""Stop signals under `maya emulate` (launcher.py, runner.py, forkserver.py), without a training script: the
launcher passes a signal on to every running rank and starts none after it, kills the ranks at a second
signal or after the grace time; a rank interrupts its script once; the zygote's messages are read one at a
time."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from maya.emulator import forkserver
from maya.emulator.launcher import _stop_signals_to, _Stopping


class FakeProcess:
    """A rank's process that records the signals sent to it."""

    def __init__(self):
        self.signals: list[int] = []
        self.killed = threading.Event()

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.killed.set()


def test_a_stop_signal_interrupts_every_running_rank_and_a_second_kills_them():
    stopping = _Stopping(grace_s=600)
    ranks = {rank: FakeProcess() for rank in range(3)}
    for rank, process in ranks.items():
        stopping.started(rank, process)
    stopping.ended(2)  # rank 2 ended before the signal: never signalled
    stopping.handle(signal.SIGTERM)
    assert stopping.by == "SIGTERM"
    assert [p.signals for p in ranks.values()] == [[signal.SIGINT], [signal.SIGINT], []]
    late = FakeProcess()  # a rank whose process began as the job stopped
    stopping.started(3, late)
    assert late.signals == [signal.SIGINT]
    stopping.handle(signal.SIGINT)  # impatient: a second signal kills
    assert stopping.by == "SIGTERM"
    assert [p.signals for p in ranks.values()] == [[signal.SIGINT, signal.SIGKILL]] * 2 + [[]]
    assert late.signals == [signal.SIGINT, signal.SIGKILL]


def test_a_rank_started_ahead_and_not_needed_is_killed_now_or_as_it_starts():
    stopping = _Stopping(grace_s=600)
    running, other = FakeProcess(), FakeProcess()
    stopping.started(3, running)
    stopping.started(0, other)
    stopping.kill_rank(3)
    stopping.kill_rank(5)  # not started yet
    late = FakeProcess()
    stopping.started(5, late)
    assert (running.signals, late.signals, other.signals) == ([signal.SIGKILL], [signal.SIGKILL], [])
    assert stopping.by is None  # the job goes on


def test_ranks_still_running_after_the_grace_time_are_killed():
    stopping = _Stopping(grace_s=0.05)
    process = FakeProcess()
    stopping.started(0, process)
    stopping.handle(signal.SIGHUP)
    assert process.killed.wait(60), process.signals
    assert process.signals == [signal.SIGINT, signal.SIGKILL]


def test_stop_signals_go_to_the_handler_while_the_job_runs_and_a_signal_ignored_stays_ignored():
    received = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with _stop_signals_to(lambda signum, frame: received.append(signum)):
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 60
            while not received and time.monotonic() < deadline:
                time.sleep(0.01)  # the handlers run in this thread, between two lines
        assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@pytest.mark.slow
def test_a_rank_turns_its_first_stop_signal_into_keyboard_interrupt_and_the_next_do_nothing():
    """Two signals at once (a process group's SIGTERM and the launcher's SIGINT): the first interrupts the script,
    the second does nothing (no error printed for a signal ignored while pending), nor do later ones."""
    code = """
import os, signal, threading, time
from maya.emulator.runner import _interrupt_on_stop_signals
_interrupt_on_stop_signals()
both = {signal.SIGINT, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, both)
signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # pending on this thread: other threads (a
signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # library's pool) would take a process-wide kill
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
    time.sleep(60)
except KeyboardInterrupt as e:
    print("interrupted", e.args[0])
os.kill(os.getpid(), signal.SIGHUP)
time.sleep(0.5)
print("still running")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["interrupted SIGINT", "still running"]
    assert "ignored due to race condition" not in done.stderr  # what a handler set to SIG_IGN while pending prints


def test_the_zygote_protocol_reads_one_message_at_a_time():
    """A rank's pid (with its pidfd) and its exit can arrive together: each read takes one message."""
    a, b = socket.socketpair()
    read_end, write_end = os.pipe()
    try:
        forkserver._send_msg(a, {"pid": 123}, [write_end])
        forkserver._send_msg(a, {"exit": -15})
        a.close()
        first, fds = forkserver._recv_msg(b)
        assert first == {"pid": 123} and len(fds) == 1
        os.close(fds[0])
        assert forkserver._recv_msg(b) == ({"exit": -15}, [])
        assert forkserver._recv_msg(b) == (None, [])
    finally:
        b.close()
        os.close(read_end)
        os.close(write_end)


def test_a_rank_process_is_signalled_until_closed():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    process = forkserver.RankProcess(os.pidfd_open(child.pid))
    try:
        process.send_signal(signal.SIGTERM)
        assert child.wait(60) == -signal.SIGTERM
        process.send_signal(signal.SIGTERM)  # ended, not yet closed: nothing happens
    finally:
        process.close()
        child.kill()
        child.wait()
    process.send_signal(signal.SIGKILL)  # closed: nothing happens
