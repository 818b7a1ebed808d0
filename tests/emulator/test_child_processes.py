"""Processes an emulated rank starts: their device calls are counted by the stubs (never recorded into the rank's
capture, which stays whole), reported per rank in the run's attrs, printed by `maya emulate` and noted by
`maya predict`; processes that make no device calls (DataLoader workers, Inductor's compile workers) say nothing."""

import json
import os
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import settings
from maya.emulator import child_processes
from maya.emulator.build import build
from maya.emulator.capture_format import CHILD_REPORT_DTYPE, D_RUNTIME, RECORD_DTYPE
from maya.simulator.notes import child_process_notes
from maya.simulator.predict import predict
from maya.simulator.trace_builder import TraceBuilder
from maya_trace_spec import Run

runner = CliRunner()


def _report(raw, pid, *, forked=0, parent=1, calls=0, device_calls=0, first="", first_device="", command="", name=""):
    (raw / "children").mkdir(parents=True, exist_ok=True)
    r = np.zeros(1, CHILD_REPORT_DTYPE)
    r[0] = (
        pid,
        1,
        parent,
        calls,
        device_calls,
        forked,
        D_RUNTIME,
        first.encode(),
        first_device.encode(),
        command.encode(),
    )
    r.tofile(raw / "children" / f"{name or pid}.bin")


def test_reports_are_read_in_pid_order_and_only_device_calls_make_work(tmp_path):
    _report(tmp_path, 20, calls=3, first="nvmlInit_v2", command="python -m maya.emulator.nvidia_smi -L")
    _report(tmp_path, 7, forked=1, calls=5, device_calls=4, first="cudaStreamCreate", first_device="cudaMemsetAsync")
    _report(tmp_path, 7, forked=1, parent=20, calls=1, device_calls=1, first_device="cudaMalloc", name="7-1")
    _report(tmp_path, 8, command="python -m x", name="8")
    (tmp_path / "children" / "8.bin").write_bytes(bytes(CHILD_REPORT_DTYPE.itemsize))  # made, killed before filled
    (tmp_path / "children" / "9.bin").write_bytes(b"")  # made, never sized: killed at its first call
    children = child_processes.read(tmp_path)
    assert [c["pid"] for c in children] == [7, 7, 20]
    assert children[2] == {
        "pid": 20,
        "rank_pid": 1,
        "parent_pid": 1,
        "forked": False,
        "command": "python -m maya.emulator.nvidia_smi -L",
        "calls": 3,
        "device_calls": 0,
        "first_api": "nvmlInit_v2",
        "first_domain": "runtime",
        "first_device_api": None,
    }
    fork, grandchild = child_processes.working(children)
    assert child_processes.describe(fork) == "pid 7 (a fork of the rank): 4 device call(s), the first cudaMemsetAsync"
    assert (
        child_processes.describe(grandchild) == "pid 7 (a fork of pid 20, ``): 1 device call(s), the first cudaMalloc"
    )
    assert child_processes.read(tmp_path / "none") == []


def _traces(attrs, represents=()):
    """A run's attrs and one captured rank, standing for `represents` too."""
    return SimpleNamespace(attrs=attrs, ranks={0: SimpleNamespace(represents=[0, *represents])})


def test_predict_notes_children_with_device_calls_and_only_those():
    quiet = {"pid": 3, "forked": False, "command": "nvidia-smi -L", "device_calls": 0, "first_device_api": None}
    assert child_process_notes(_traces({})) == []
    assert child_process_notes(_traces({"child_processes": {"0": [quiet]}})) == []
    working = {**quiet, "pid": 4, "command": "python -c 'a\n  b'", "device_calls": 12, "first_device_api": "cudaMalloc"}
    forked = {**working, "pid": 5, "forked": True, "device_calls": 3, "parent_pid": 1, "rank_pid": 1}
    (note,) = child_process_notes(_traces({"child_processes": {"2": [forked], "0": [quiet, working]}}))
    assert note.startswith("not priced: 2 process(es) started by rank(s) 0, 2 made 15 device call(s)")
    assert "(the first: cudaMalloc in pid 4, `python -c 'a b'`)" in note and "multiplied" not in note
    (note,) = child_process_notes(_traces({"child_processes": {"0": [forked]}}, represents=[1, 2]))
    assert "a fork of the rank" in note and note.endswith("not multiplied for the 3 ranks they stand for")


@pytest.mark.parametrize(
    "found",
    [[], "2", {"0": "x"}, {"0": [{"device_calls": "7"}, "?", {"device_calls": True}]}, {"r": [{"device_calls": 1}]}],
)
def test_predict_notes_nothing_of_malformed_child_reports(found):
    assert child_process_notes(_traces({"child_processes": found})) == []


def _one_rank(run_dir, attrs=None):
    b = TraceBuilder(world_size=1)
    k = b.rank(0)
    for it in range(3):
        k.iteration = it
        k.kernel(1_000_000)
    return b.write(run_dir, attrs=attrs)


@pytest.mark.slow
def test_a_prediction_of_a_run_whose_rank_started_working_children_says_so(tmp_path):
    child = {"pid": 4, "forked": False, "command": "python -c work", "device_calls": 7, "first_device_api": "x"}
    run = _one_rank(tmp_path / "run", {"child_processes": {"0": [child]}})
    notes = predict(run, durations="measured").notes
    assert any(n.startswith("not priced: 1 process(es) started by rank(s) 0 made 7 device call(s)") for n in notes)
    assert not any(
        n.startswith("not priced") for n in predict(_one_rank(tmp_path / "plain"), durations="measured").notes
    )


NATIVE_RANK = textwrap.dedent(
    """
    import ctypes, os, subprocess, sys
    rt = ctypes.CDLL(sys.argv[1])
    core = ctypes.CDLL(sys.argv[2])
    p = ctypes.c_void_p()

    def memsets(n):
        for _ in range(n):
            assert rt.cudaMemsetAsync(p, 0, 4096, None) == 0

    assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
    memsets(3)
    pid = os.fork()
    if pid == 0:  # the rank's buffers, with records not yet written, are the child's too
        open(sys.argv[5] + f"/children/{os.getpid()}.bin", "wb").write(b"an earlier process with this pid")
        memsets(5)
        os._exit(0)
    os.waitpid(pid, 0)
    env = {**os.environ, "MAYA_EMU_RANK_PID": str(os.getpid())}
    started = [subprocess.run([sys.executable, "-c", c], env=env, capture_output=True, text=True) for c in sys.argv[3:5]]
    memsets(2)
    core.maya_emu_finish()
    print(pid, os.getpid(), *(s.stdout.strip() for s in started), "".join(s.stderr for s in started), sep="\\n")
    """
)
HOST_ONLY = textwrap.dedent(
    """
    import ctypes, os, sys
    rt = ctypes.CDLL({runtime!r}); h = ctypes.c_void_p(); d = ctypes.c_void_p()
    assert rt.cudaMallocHost(ctypes.byref(h), 4096) == 0 and rt.cudaFreeHost(h) == 0
    assert rt.cudaMalloc(ctypes.byref(d), ctypes.c_size_t(1 << 50)) != 0  # out of memory: no allocation
    pid = os.fork()
    if pid == 0:  # a fork of this process, not of the rank
        rt.cudaMalloc(ctypes.byref(d), 64)
        rt.cudaFree(d)
        os._exit(0)
    os.waitpid(pid, 0)
    print(os.getpid(), pid)
    """
)
"""A program the rank starts that allocates pinned host memory only, fails a device allocation and forks a process
that allocates and frees device memory."""


@pytest.mark.slow
def test_children_are_counted_apart_and_the_ranks_capture_stays_whole(tmp_path):
    """A fork of the rank, a program it starts and that program's fork call the runtime stub: each gets its report
    (a fork of the rank or of its parent, or its command line with its lines joined; its first call, device calls
    counted: device allocations and work, not pinned host memory, frees or failed allocations; one line on its
    stderr if it made one), a stale report of a reused pid is kept, and the rank's records are its own 3 + 2
    memsets and its allocation, in order, none of the children's (the fork shared its unwritten buffer)."""
    lib = build(settings.emulator_cache())
    raw = tmp_path / "raw"
    (raw / "children").mkdir(parents=True)
    (raw / "config").write_text(f"out_dir={raw}\ndevices=1\n")
    runtime = next(lib.glob("libcudart.so.*"))
    started = (
        f"import ctypes\nrt = ctypes.CDLL({str(runtime)!r})\np = ctypes.c_void_p()\nrt.cudaMalloc(ctypes.byref(p), 64)"
    )
    env = {**os.environ, "MAYA_EMU_CONFIG": str(raw / "config"), "LD_PRELOAD": str(lib / "libmaya_emu.so")}
    env.pop(settings.EMU_RANK_PID.name, None)  # the fork finds the rank's pid all the same
    script = [NATIVE_RANK, str(runtime), str(lib / "libmaya_emu.so"), started, HOST_ONLY.format(runtime=str(runtime))]
    out = subprocess.run(
        [sys.executable, "-c", *script, str(raw)], env=env, capture_output=True, text=True, check=True
    ).stdout
    forked_pid, rank_pid, _, host_only = out.splitlines()[:4]
    host_pid, grandchild_pid = map(int, host_only.split())
    records = np.concatenate([np.fromfile(p, RECORD_DTYPE) for p in raw.glob("calls-*.bin")])
    assert len(records) == 1 + 3 + 2 and (np.diff(np.sort(records["seq"])) == 1).all()
    assert (raw / "children" / f"{forked_pid}.bin").read_bytes() == b"an earlier process with this pid"
    children = {c["pid"]: c for c in child_processes.read(raw)}
    assert {c["rank_pid"] for c in children.values()} == {int(rank_pid)}
    forked = children.pop(int(forked_pid))
    assert (forked["forked"], forked["parent_pid"], forked["calls"], forked["device_calls"]) == (
        True,
        int(rank_pid),
        5,
        5,
    )
    assert (
        child_processes.describe(forked)
        == f"pid {forked_pid} (a fork of the rank): 5 device call(s), the first cudaMemsetAsync"
    )
    host = children.pop(host_pid)
    assert (host["forked"], host["calls"], host["device_calls"], host["first_api"]) == (
        False,
        3,
        0,
        "a pinned host allocation",
    )
    grandchild = children.pop(grandchild_pid)
    assert (grandchild["forked"], grandchild["parent_pid"], grandchild["calls"], grandchild["device_calls"]) == (
        True,
        host_pid,
        2,
        1,
    )
    assert child_processes.describe(grandchild).startswith(f"pid {grandchild_pid} (a fork of pid {host_pid}, `")
    (program,) = children.values()
    assert not program["forked"] and program["command"].endswith(" ".join(started.split()))
    assert (program["calls"], program["device_calls"], program["first_api"], program["first_device_api"]) == (
        1,
        1,
        "a device allocation",
        "a device allocation",
    )
    lines = [line for line in out.splitlines() if "it is not the emulated rank" in line]
    assert len(lines) == 2  # the program's and its fork's; the host-only program's says nothing
    assert all(" calls a device allocation: " in line for line in lines)
    assert any(f"process {grandchild_pid} (a fork of pid {host_pid}, " in line for line in lines)


GEMM = "import torch; a = torch.ones(128, 128, device='cuda'); (a @ a).sum().item()"
"""What child_processes.py's subprocess runs."""


def _emulate(tmp_path, *argv):
    out = tmp_path / "run"
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "python", *map(str, argv)])
    return r, out


@pytest.mark.e2e
def test_every_kind_of_child_is_reported_and_none_is_in_the_ranks_trace(tmp_path):
    """A fork before CUDA, a spawn child and a subprocess each run a 128 x 128 GEMM: three children with device
    calls, named by `maya emulate`, noted by `maya predict` and warned of by `maya trace check` (exit 0), none of
    their GEMMs in the rank's trace. A fork after CUDA is refused by torch, as on a GPU, and calls nothing;
    nvidia-smi's NVML queries are listed, with no device call; the DataLoader's workers call nothing and are not
    listed."""
    r, out = _emulate(tmp_path, WORKLOADS / "child_processes.py")
    assert r.exit_code == 0, r.output
    log = (out / "logs" / "rank0.txt").read_text()
    for line in ("fork child: gemm (exit 0)", "spawn child: gemm (exit 0)", "subprocess exit 0", "done"):
        assert line in log
    assert "fork child: Cannot re-initialize CUDA in forked subprocess (exit 0)" in log
    run = Run(out)
    assert run.info["status"] == "complete"
    children = json.loads(run.info["attrs"])["child_processes"]["0"]
    working = [c for c in children if c["device_calls"]]
    assert [c["forked"] for c in working] == [True, False, False]
    assert "multiprocessing" in working[1]["command"] and working[2]["command"].endswith(GEMM)
    assert all(c["first_device_api"] == "a device allocation" for c in working)
    (smi,) = [c for c in children if not c["device_calls"]]
    assert smi["command"].endswith("maya.emulator.nvidia_smi -L") and smi["first_domain"] == "nvml"
    assert "(without the device work of processes the ranks started)" in " ".join(r.output.split())
    assert "note: rank 0 started 3 process(es) whose device calls were counted, not captured" in r.output
    calls = run.table("api_calls")
    assert 128 not in calls.column("gemm_m").to_pylist()  # the children's GEMMs
    assert 64 in calls.column("gemm_m").to_pylist()  # the rank's own
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    notes = json.loads(predicted.stdout)["notes"]
    assert any(n.startswith("not priced: 3 process(es) started by rank(s) 0 made") for n in notes), notes
    checked = runner.invoke(app, ["trace", "check", str(out)])
    said = " ".join(checked.output.split())
    assert checked.exit_code == 0 and "warning:" in said and "3 process(es) its ranks started made" in said


WITH_WORKERS = textwrap.dedent(
    """
    import glob, runpy, sys
    runpy.run_path(sys.argv[1], run_name="__main__")
    children = [pid for f in glob.glob("/proc/self/task/*/children") for pid in open(f).read().split()]
    commands = [open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode() for pid in children]
    print("compile workers running:", sum("compile_worker" in c for c in commands))
    """
)
"""Runs a workload, then says how many Inductor compile workers the rank has started (they outlive the compile)."""


def _quiet(r, out):
    """The run succeeded and no process its rank started called a stub."""
    assert r.exit_code == 0, r.output
    assert "child_processes" not in json.loads(Run(out).info["attrs"])
    assert "whose device calls were counted" not in r.output


@pytest.mark.e2e
def test_dataloader_workers_say_nothing(tmp_path):
    """A DataLoader's forked workers read CPU tensors and call no stub."""
    _quiet(*_emulate(tmp_path, WORKLOADS / "dataloader_workers.py"))


@pytest.mark.e2e
def test_inductor_compile_workers_say_nothing(tmp_path, monkeypatch):
    """Inductor's compile workers (two threads, so that it starts them: the rank's log shows them running) call no
    stub."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    wrapper = tmp_path / "with_workers.py"
    wrapper.write_text(WITH_WORKERS)
    r, out = _emulate(tmp_path, wrapper, WORKLOADS / "compiled_mlp.py")
    _quiet(r, out)
    assert int(re.search(r"compile workers running: (\d+)", (out / "logs" / "rank0.txt").read_text())[1]) > 0
