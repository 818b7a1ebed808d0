"""CUDA-event timings under emulation read the device-time oracle's estimate (`--device-time`)."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli.app import app
from maya.core import hardware as catalog
from maya.simulator.durations import RooflineDurations
from maya.simulator.opcodes import WORK
from maya_trace_spec import Run, read_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def emulate(tmp_path, device_time: str, script: str) -> tuple[str, str]:
    run = tmp_path / device_time
    result = CliRunner().invoke(
        app, ["emulate", "--device-time", device_time, "--out", str(run), "--", "python", str(WORKLOADS / script)]
    )
    assert result.exit_code == 0, result.output
    return str(run), (run / "logs" / "rank0.txt").read_text()


def test_event_timings_read_the_oracles_estimate_of_the_timed_stream(tmp_path):
    run, log = emulate(tmp_path, "roofline", "event_timing.py")
    ms = {int(n): float(v) for n, v in re.findall(r"mm x(\d): ([0-9.]+) ms", log)}
    gemm = pd.DataFrame(
        {
            "opcode": [WORK],
            "dtype": ["bf16"],
            "flops": [2.0 * 1024**3],
            "numel": [np.nan],
            "work_bytes": [2.0 * 3 * 1024**2],
            "op": ["mm"],
            "comm_size": [np.nan],
            "comm_nodes": [np.nan],
            "comm_bytes": [np.nan],
            "collective": [None],
        }
    )
    one = RooflineDurations().device_ns(gemm, catalog.get("h100-sxm"))[0] / 1e6
    assert ms[1] == pytest.approx(one, rel=1e-6)  # the GEMM on the other stream is not timed
    assert ms[2] == pytest.approx(2 * one, rel=1e-6) and ms[4] == pytest.approx(4 * one, rel=1e-6)
    calls = read_table(run, "api_calls").to_pandas()
    timings = calls[calls["api"] == "cudaEventElapsedTime"]
    assert [json.loads(a)["device_time_ns"] for a in timings["args"]] == [round(n * one * 1e6) for n in (1, 2, 4)]
    attrs = json.loads(Run(run).info["attrs"])
    assert attrs["device_time"]["options"] == {"hardware": "h100-sxm", "durations": "roofline"}
    assert attrs["device_time_answers"]["0"]["oracle"] == "roofline on h100-sxm"
    predicted = CliRunner().invoke(app, ["predict", run, "--durations", "roofline"])
    said = " ".join(predicted.output.split())
    assert "3 of 3 CUDA-event timings read Maya's estimate (roofline on h100-sxm)" in said
    assert "not host time (timed in (no op) 3)" in said  # where the timings were made: the script, outside any op


def test_host_time_without_an_oracle_and_predict_says_so(tmp_path):
    run, log = emulate(tmp_path, "host", "event_timing.py")
    calls = read_table(run, "api_calls").to_pandas()
    timings = calls[calls["api"] == "cudaEventElapsedTime"]
    assert len(timings) == 3 and timings["args"].isna().all()
    assert "device_time" not in json.loads(Run(run).info["attrs"])
    predicted = CliRunner().invoke(app, ["predict", run, "--durations", "roofline"])
    assert "3 CUDA-event timings read host time (emulated without a device-time oracle)" in " ".join(
        predicted.output.split()
    )
