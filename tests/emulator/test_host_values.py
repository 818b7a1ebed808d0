"""Device values the host can know (`native/host_values.cpp`): bookkeeping over values the host put on
the device is computed on the host and read back as a real run reads it; routing on scores only a GPU
computes gets a balanced router's choices, so a mixture of experts runs every expert and `maya predict`
says the routing was assumed."""

import json

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli.app import app
from maya.simulator.trace import load
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
runner = CliRunner()


def emulate(tmp_path, script, *args):
    out = tmp_path / "run"
    r = runner.invoke(app, ["emulate", "--out", str(out), *args, "--", "python", str(WORKLOADS / script)])
    assert r.exit_code == 0, r.output
    return r.output, out


def test_bookkeeping_reads_are_computed(tmp_path):
    output, out = emulate(tmp_path, "device_bookkeeping.py", "--nproc-per-node", "2")
    assert "tokens 944 of 944" in output  # the count of the real labels (SPMD all-reduce: own data for peers')
    assert "functional all-reduce tokens 944" in output  # waited through an AsyncCollectiveTensor
    assert "bincount [16, 16, 16, 16, 16, 16, 16, 16]" in output  # 64 tokens x top-2 over 8 experts
    assert "histc [16, 16, 16, 16, 16, 16, 16, 16]" in output
    assert "expert 3 rows 8" in output  # first choices spread over all experts
    assert "offsets [16, 32, 48, 64, 80, 96, 112, 128]" in output
    assert "one-expert counts [32, 32, 32, 32]" in output  # equal 8-byte copies in equal windows: none flipped
    assert "doubling loop ended after 20 passes" in output  # 2**20 > 1e6: the real count, no stand-in
    reads = [
        json.loads(c["args"])["stand_in"]
        for c in Run(out).table("api_calls").to_pylist()
        if c["data_dependent"] and c["args"]
    ]
    assert "computed" in reads and "routed" in reads
    attrs = json.loads(load(out).info["attrs"])
    assert attrs["routing_stand_ins"]["0"] == {"aten::topk": 5}  # the routing, then the four layers'


def test_moe_routes_tokens_to_every_expert(tmp_path):
    _, out = emulate(tmp_path, "top1_routing.py", "--iterations", "2")
    calls = load(out).ranks[0].calls
    ops = load(out).ranks[0].ops.set_index("op_id")["module_path"]
    gemms = calls[calls["gemm_m"].notna()]
    modules = gemms["op_id"].map(ops).fillna("")
    expert = modules.str.startswith("MoE.experts.")
    assert set(modules[expert]) == {f"MoE.experts.{e}" for e in range(4)}  # every expert ran its GEMMs
    assert set(gemms.loc[expert, "gemm_m"]) == {64}  # 256 tokens, top-1 over 4 experts: 64 each
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    notes = json.loads(p.stdout)["notes"]
    assert any("routing was assumed" in n and "aten::argmax" in n for n in notes), notes


def test_nan_checks_agree_within_a_step(tmp_path):
    """Megatron's per-bucket `isnan`/`isinf` of a norm only a GPU computes: the second bucket asks in the same
    window as the first, which a loop stand-in answered with 1 (Inf); the checks now answer as a healthy run."""
    output, _ = emulate(tmp_path, "grad_nan_checks.py")
    assert "gradient checks agreed in every step" in output


def test_a_freed_known_storage_leaves_its_block_unknown(tmp_path):
    """DeepSpeed's norm checks: a -1.0 sentinel the host filled is freed and a one-element `stack` (a copy no op
    observes) takes its block. The stacked norm is a GPU's value: its `~isfinite | < 0` is read as unknown (a
    healthy run's "valid"), not computed from the block's stale bytes as the freed sentinel's known value."""
    output, out = emulate(tmp_path, "norm_sentinel_reuse.py")
    assert "the stacked norm took the sentinel's block in 3 of 3 steps; invalid norm in steps []" in output
    reads = [
        json.loads(c["args"])["stand_in"]
        for c in Run(out).table("api_calls").to_pylist()
        if c["data_dependent"] and c["args"]
    ]
    assert reads == ["computed", "unknown"] * 3  # masked_fill_ reads the sentinel; the check reads a GPU's value


def test_a_value_a_kernel_rewrote_is_read_as_unknown(tmp_path):
    """`_foreach_add_` returns nothing: the buffer the host filled (known, 0) it writes must become unknown, or
    a loop on it reads 0 for ever (30 passes, the script's cap); `.cpu()` and `.item()` of it then read as a
    value only a GPU computes: 0 first, then the stand-in 1, as a GPU's one pass."""
    output, _ = emulate(tmp_path, "stale_known_values.py")
    assert "copy loop ended after 2 passes" in output
    assert "item loop ended after 2 passes" in output
    assert "unknown read: copy 0.0 item 0.0" in output  # the copy read the host's stale 7.0 before


def test_a_loop_on_an_unchanging_known_value_is_stopped(tmp_path, monkeypatch):
    """A known value read again after the same work counts toward MAYA_EMU_LOOP_LIMIT: a loop on it fails
    loudly, naming the read, rather than spin silently (to the script's cap of 1000 passes here)."""
    monkeypatch.setenv("MAYA_EMU_LOOP_LIMIT", "20")
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "stale_known_values.py"), "--endless"],
    )
    assert r.exit_code == 1, r.output
    assert "read the same device value 20 times" in r.output
    assert "the same known value each time" in r.output
    assert "aten::_to_copy > aten::copy_" in r.output
    assert "endless loop ran" not in r.output
