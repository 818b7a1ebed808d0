"""A zygote for emulated ranks: one Python process, started with the stub libraries preloaded and torch
imported, forks every rank. A rank then skips interpreter start and `import torch` (about 2 CPU-s each,
most of a search point's cost), and the ranks share torch's pages.

The launcher starts the zygote (`prestart`) before writing the run's first row, so that its imports overlap the
launcher's own work; a rank waits for it to be ready. The zygote (`python -m maya.emulator.forkserver`) listens on
an abstract Unix socket. A
request carries the rank's argv, environment and working directory, and the write end of a pipe for
its output; the zygote forks, answers the child's pid with a pidfd for it (the launcher signals the rank
through it, race-free: `RankProcess`) and, when the child exits, its exit status (as `subprocess`
reports it: negative for a signal). The child becomes a fresh emulated process
(`maya_emu_restart`, refused if the zygote recorded anything) and runs `runner.py`. The zygote ignores
stop signals (the launcher passes them on to the ranks it runs); it ends, and stops its children
(SIGTERM: each flushes its capture), when the process that started it closes its stdin.

`MAYA_EMU_FORKSERVER=0` turns the zygote off (every rank a new interpreter, as before).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from maya.core import settings

PER_RANK = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_PORT",
    settings.EMU_CONFIG.name,
    settings.EMU_OUT.name,
    settings.EMU_MAILBOX.name,
    settings.EMU_ITERATIONS.name,
    settings.EMU_DEVICE_TIME.name,
    settings.EMU_MEMORY_HISTORY.name,
)
"""Variables that differ between the ranks of one zygote (read lazily, after the fork)."""
IMPORT_TIME = (
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NCCL",
    "CUBLAS",
    "CUDNN",
    "NVIDIA",
    "TRITON",
    "OMP",
    "KMP",
    "GOMP",
    "MKL",
    "OPENBLAS",
    "LD_",
    "PYTHON",
    "MAYA_EMU",
    "LANG",
    "LC_",
    "TZ",
    "SYMPY",
    "MPMATH",
    "SAGE_ROOT",
)
"""Prefixes of the variables that can change what the zygote's imports do: a zygote serves every
environment that agrees on these (others, e.g. a search's parameters or MAYA_HOME, are the rank's own,
read after the fork)."""
PRELOAD = ("torch", "torch.distributed", "torch.distributed.tensor", "maya.core.script_runner")
"""What the zygote imports: torch and what every rank needs, not the user's libraries, nor `torch._dynamo`
(with Inductor and Triton, ~1.7 CPU-s, imported by every optimizer's constructor): importing it reads
Inductor's settings and temporary directories from the environment, so a script that sets them itself
before importing torch would run with the zygote's instead. `torch.distributed.tensor` (with SymPy) is the part
of that import that reads no switch of torch's, Inductor's or Triton's, only SymPy's and mpmath's own (SYMPY_*,
MPMATH_*, SAGE_ROOT, in IMPORT_TIME), ~0.7 of its CPU-s. The price of that speed: torch does not import SymPy at
import, so in a new interpreter a script that sets SYMPY_*/MPMATH_* itself (`os.environ`) before importing torch
gets its own values, while a forked rank keeps the zygote's (as with torch's own variables, `TORCH_LOGS` say);
`MAYA_EMU_FORKSERVER=0` runs such a script as written (`docs/emulator.md`). Python's `random` reseeds itself in
a fork, and each rank reseeds numpy's global generator, so ranks draw apart as new processes would."""
_HEADER = struct.Struct("!I")


class ForkServerError(RuntimeError):
    """The zygote ended while a rank ran."""


class ZygoteUnavailable(ForkServerError):
    """The zygote could not be started or reached: nothing ran, so a new process can run the rank."""


def _send_msg(sock: socket.socket, data: dict, fds: Sequence[int] = ()) -> None:
    payload = json.dumps(data).encode()
    socket.send_fds(sock, [_HEADER.pack(len(payload)) + payload], list(fds))


def _recv_msg(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One message and the descriptors sent with it; (None, []) at end of stream. Reads no byte past the
    message: the next one (a rank's exit after its pid) stays for the next call."""
    data, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 4, socket.MSG_WAITALL)
    if not data:
        return None, fds
    data += _recv_exact(sock, _HEADER.size - len(data))
    (size,) = _HEADER.unpack(data)
    return json.loads(_recv_exact(sock, size)), fds


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise ConnectionError("zygote connection closed mid-message")
        data += more
    return data


class RankProcess:
    """A running rank's process, signalled through a pidfd (never another process that reuses its pid)
    until `close`; signals after it ended do nothing."""

    def __init__(self, pidfd: int):
        self._fd: int | None = pidfd
        self._lock = threading.RLock()  # re-entrant: a signal handler can interrupt a send in its own thread

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    signal.pidfd_send_signal(self._fd, sig)
                except ProcessLookupError:  # it exited, not yet reaped
                    pass

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


# ------------------------------------------------------------------ client (in `maya emulate`)


class ForkServer:
    """A running zygote for one environment; `run` starts a rank in it."""

    def __init__(self, env: Mapping[str, str]):
        name = f"maya-zygote-{uuid.uuid4().hex}"
        self.address = "\0" + name  # abstract: nothing to clean up on disk
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "maya.emulator.forkserver", name],
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        except OSError as e:
            raise ZygoteUnavailable(f"the emulator's zygote cannot start: {e}") from e
        self.active, self.retired = 0, False  # ranks running in it; replaced by a newer zygote
        self._ready = False
        self._ready_lock = threading.Lock()

    def wait_ready(self) -> None:
        """Wait until the zygote has imported what it preloads (it starts doing so at once, while the launcher
        goes on with its own work); raises ZygoteUnavailable if it ended instead."""
        with self._ready_lock:
            if self._ready:
                return
            ready = self.proc.stdout.readline()
            if ready.strip() != b"ready":
                self.proc.kill()
                self.proc.wait()
                raise ZygoteUnavailable(f"the emulator's zygote did not start (exit {self.proc.returncode})")
            self._ready = True

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        output: Callable[[str], None],
        started: Callable[[RankProcess], None] | None = None,
    ) -> int:
        """Run the rank `python -m maya.emulator.runner ARGV` with `env` in a fork; its process goes to
        `started` (valid until this returns), every line it prints to `output`; returns its exit status."""
        self.wait_ready()
        read_end, write_end = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(self.address)
                _send_msg(conn, {"argv": list(argv), "env": dict(env), "cwd": os.getcwd()}, [write_end])
            except OSError as e:
                os.close(read_end)
                raise ZygoteUnavailable(f"the emulator's zygote is gone: {e}") from e
            finally:
                os.close(write_end)
            forked, fds = _recv_msg(conn)
            process = RankProcess(fds[0]) if forked is not None and fds else None
            try:
                if process is not None and started is not None:
                    started(process)
                with os.fdopen(read_end, encoding="utf-8", errors="replace") as lines:
                    for line in lines:
                        output(line)
                reply, _ = _recv_msg(conn)
            finally:
                if process is not None:
                    process.close()
        if reply is None or "exit" not in reply:
            raise ForkServerError("the emulator's zygote ended before the rank did")
        return int(reply["exit"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the zygote stops its children and exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


_current: tuple[tuple, ForkServer] | None = None  # the zygote kept, with the environment key it serves
_lock = threading.Lock()


def enabled() -> bool:
    return settings.forkserver()


def current() -> ForkServer | None:
    """The zygote this process keeps, if any."""
    return _current[1] if _current else None


def _server_for(env: Mapping[str, str]) -> ForkServer:
    """The zygote kept for `env`, started if there is none for it (call with `_lock` held)."""
    global _current
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in PER_RANK))
    if _current is None or _current[0] != key or not _current[1].alive:
        if _current is not None:
            _current[1].retired = True
            if not _current[1].active:
                _current[1].close()
        _current = None
        _current = (key, ForkServer({k: v for k, v in env.items() if k not in PER_RANK}))
    return _current[1]


def prestart(env: Mapping[str, str]) -> None:
    """Start the zygote for `env` now, so that its imports overlap the launcher's own work before the first
    rank; `lease` then finds it. A zygote that cannot start is left to `lease` to report."""
    with _lock:
        try:
            _server_for(env)
        except ZygoteUnavailable:
            pass


@contextmanager
def lease(env: Mapping[str, str]) -> Iterator[ForkServer]:
    """The zygote for `env` (environments that agree on the IMPORT_TIME variables, but for PER_RANK,
    share one), held for one rank. One zygote is kept for the life of this process; a changed
    environment replaces it, and the one replaced ends once no rank of it runs any more."""
    with _lock:
        server = _server_for(env)
        server.active += 1
    try:
        yield server
    finally:
        with _lock:
            server.active -= 1
            if server.retired and not server.active:
                server.close()


@atexit.register
def _close_all() -> None:
    global _current
    if _current is not None:
        _current[1].close()
    _current = None


# ------------------------------------------------------------------ the zygote


def _child(request: dict, out_fd: int) -> None:
    """In the forked rank: its own output, environment and directory, then the runner. Never returns."""
    code = 70
    try:
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if "numpy.random" in sys.modules:  # imported by the zygote (torch._dynamo): reseeded from the OS, as a
            sys.modules["numpy.random"].seed()  # new process's is, so that ranks draw apart
        if ctypes.CDLL(None).maya_emu_restart() != 0:
            print(
                "maya emulator: the zygote recorded device calls before forking; set MAYA_EMU_FORKSERVER=0",
                file=sys.stderr,
            )
        else:
            from .runner import run_and_exit

            run_and_exit(request["argv"])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def serve(name: str) -> None:
    """Fork a rank per request on the abstract socket `name` until stdin closes."""
    # stop signals are for the ranks (the launcher passes them on, or they reach the whole process group);
    # the zygote ends with its parent
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    for module in PRELOAD:
        __import__(module)
    if ctypes.CDLL(None).maya_emu_restart() != 0:
        print("maya emulator: importing torch recorded device calls; the zygote cannot be used", file=sys.stderr)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "parent":  # the launcher is gone or done: stop what still runs
                for pid, _conn in children.values():
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                return
            if key.data == "accept":
                conn, _ = listener.accept()
                request, fds = _recv_msg(conn)
                if request is None or len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for _, other in children.values():
                        other.close()
                    selector.close()
                    _child(request, fds[0])
                os.close(fds[0])
                pidfd = os.pidfd_open(pid)
                try:
                    _send_msg(conn, {"pid": pid}, [pidfd])
                except OSError:  # the launcher is gone: its rank will be stopped with the others
                    pass
                children[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "child")
            else:  # a child ended
                pidfd = key.fd
                pid, conn = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    _send_msg(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()


if __name__ == "__main__":
    try:
        serve(sys.argv[1])
    finally:  # no exit handlers: the stubs' would write an empty capture into the working directory
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
