"""cudaMemPrefetchAsync (bitsandbytes' paged optimizers): managed memory is device memory under the emulator, so a
prefetch of an allocation moves nothing and succeeds, one outside it is refused; a runtime function neither torch
nor the emulator knows still fails loudly, by name."""

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVALID_VALUE, NOT_SUPPORTED = 1, 801


def test_a_prefetch_of_managed_memory_is_recorded_and_moves_nothing(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "managed_prefetch.py")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "prefetch 0" in lines and f"outside {INVALID_VALUE}" in lines
    assert f"advise {NOT_SUPPORTED}" in lines
    assert "unimplemented CUDA API cudaMemAdvise called" in r.output
    calls = Run(out).table("api_calls")
    prefetches = calls.filter(pc.equal(calls.column("api"), "cudaMemPrefetchAsync")).to_pylist()
    assert [c["status"] for c in prefetches] == [0, INVALID_VALUE]
    assert all(c["kernel_id"] is None and c["bytes"] is None for c in prefetches)  # no device work
