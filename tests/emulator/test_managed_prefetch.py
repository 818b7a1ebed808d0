"""cudaMemPrefetchAsync (bitsandbytes' paged optimizers): managed memory is device memory under the emulator, so a
prefetch of a managed allocation moves nothing and succeeds; a range outside it, a device the job lacks, an
undocumented location, flags and memory that is not managed are refused with the runtime's codes; a runtime
function neither torch nor the emulator knows still fails loudly, by name."""

import re

import pyarrow.compute as pc
import pytest
import torch
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVALID_VALUE, INVALID_DEVICE, NOT_SUPPORTED = 1, 101, 801


def test_a_prefetch_of_managed_memory_is_recorded_and_moves_nothing(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "managed_prefetch.py")])
    assert r.exit_code == 0, r.output
    printed = [line.split() for line in r.output.splitlines() if re.fullmatch(r"\S+ -?\d+", line)]
    codes = {name: int(code) for name, code in printed}
    expected = {
        "device": 0,
        "host": 0,
        "outside": INVALID_VALUE,
        "device7": INVALID_DEVICE,
        "device-2": INVALID_DEVICE,
        "unmanaged": INVALID_VALUE,
    }
    if int(torch.version.cuda.split(".")[0]) >= 13:
        expected |= {"type99": INVALID_VALUE, "flags5": INVALID_VALUE}
    assert {name: codes[name] for name in expected} == expected
    assert codes["advise"] == NOT_SUPPORTED
    assert "unimplemented CUDA API cudaMemAdvise called" in r.output
    calls = Run(out).table("api_calls")
    prefetches = calls.filter(pc.equal(calls.column("api"), "cudaMemPrefetchAsync")).to_pylist()
    assert [c["status"] for c in prefetches] == [codes[name] for name, _ in printed if name in expected]
    assert all(c["kernel_id"] is None and c["bytes"] is None for c in prefetches)  # no device work
