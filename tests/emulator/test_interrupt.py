"""A stop signal to `maya emulate` alone (what `timeout`, Slurm and Kubernetes send): every rank stops, what
they captured is converted, the run is marked interrupted, and `maya trace validate` and `maya predict` say so;
with `--memory-history` too (the rank's history is not taken then, and `maya memory` says why)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya import api
from maya.cli import app
from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

START_S = 900
"""Bound on the wait for the capture to be under way (a first emulation builds the stubs; the machine may be
loaded)."""
STOP_S = 300
"""Bound on the wait for `maya emulate` to end after the signal (ranks stop and their captures convert)."""


def _session(sid: int) -> list[int]:
    """The processes still in session `sid` (the launcher's: its zygote and ranks stay in it)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[3]) == sid:
            left.append(int(stat.parent.name))
    return left


def _collect(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


def _until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("flags", [[], ["--memory-history"]], ids=["plain", "memory history"])
def test_sigterm_to_maya_emulate_stops_every_rank_and_keeps_what_they_captured(tmp_path, flags):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "maya", "emulate", *flags, "--out", str(out), "--iterations", "0", "--"]
        + ["python", str(WORKLOADS / "long_training.py")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own session: what is left of it can be found
    )
    lines: list[str] = []
    reader = threading.Thread(target=_collect, args=(proc.stderr, lines), daemon=True)
    reader.start()
    try:
        # rank 0's output is echoed: at "step 3" it completed three iterations (the script trains 10,000)
        assert _until(lambda: any(line.startswith("step 3:") for line in lines) or proc.poll() is not None, START_S)
        assert proc.poll() is None, "".join(lines)[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_S) == 128 + signal.SIGTERM, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(60)
    output = " ".join("".join(lines).split())
    assert "interrupted by SIGTERM" in output, output[-3000:]
    assert _until(lambda: not _session(proc.pid), 60), f"left running: {_session(proc.pid)}"

    run = Run(out)
    assert run.info["status"] == "interrupted"
    assert json.loads(run.info["attrs"])["interrupted_by"] == "SIGTERM"
    assert not (out / ".capture").exists()  # converted, then removed
    assert run.table("api_calls").num_rows > 0 and run.ranks == [0]
    assert validate_run(out) == []

    checked = CliRunner().invoke(app, ["trace", "validate", str(out)])
    assert checked.exit_code == 1
    assert "not a whole capture: interrupted by SIGTERM" in " ".join(checked.output.split())
    predicted = CliRunner().invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    prediction = json.loads(predicted.stdout)
    assert prediction["iterations"] >= 3
    assert any("interrupted by SIGTERM" in note for note in prediction["notes"]), prediction["notes"]
    if flags:
        with pytest.raises(api.UntrustedHistory, match="rank 0 has no memory history: the rank was stopped by SIGINT"):
            api.peak_memory(out)
