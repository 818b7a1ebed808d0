"""Which calls are a forward pass run again in the backward pass (`work.recomputed`), and what MFU and HFU count:
backward ops a producer attributes to modules keep their FLOPs in MFU; ops under a module's forward range
opened in the backward phase (activation recomputation) count in HFU alone."""

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware as catalog
from maya.simulator import simulation
from maya.simulator.iterations import Iterations
from maya.simulator.predict import summarize
from maya.simulator.report import model_flops_of
from maya.simulator.trace import load
from maya.simulator.work import recomputed
from maya_trace_spec import synthetic
from maya_trace_spec.vocabulary import MODULE_RANGE_PREFIX

H100 = catalog.get("h100-sxm")


@pytest.fixture
def traces(tmp_path, monkeypatch):
    """A one-rank synthetic run: every op, backward ones included, attributed to `model.layers.0.mlp`; its
    random calls predicted as one whole iteration (their accidental repeats are no iterations)."""
    monkeypatch.setattr(
        simulation, "detect", lambda trace, opcodes: Iterations(np.array([0, len(opcodes)]), np.array([0]), "whole")
    )
    return load(synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=400, ops_per_rank=30))


def flops(traces) -> tuple[float, float, np.ndarray]:
    """Model and hardware FLOPs of the iteration, roofline-priced, and each call's FLOPs."""
    sim = simulation.simulate(traces, H100, "roofline")
    p = summarize(sim)
    every = np.nan_to_num(sim.programs[0].frame["flops"].to_numpy(dtype="float64"))
    return p.model_flops_per_iteration, p.hardware_flops_per_iteration, every


def gemm_ops(trace, phase: str) -> np.ndarray:
    """Ops of `phase` that GEMM calls run under."""
    ops = trace.ops.set_index("op_id")["phase"]
    under = trace.calls.loc[trace.calls["gemm_m"].notna(), "op_id"].unique()
    return np.array([op for op in under if ops[op] == phase])


def test_backward_ops_attributed_to_modules_keep_their_flops_in_mfu(traces):
    trace = traces.ranks[0]
    assert (
        len(gemm_ops(trace, "backward"))
        and trace.ops.loc[trace.ops["phase"] == "backward", "module_path"].notna().all()
    )
    assert not recomputed(trace).any()
    model, hardware, every = flops(traces)
    assert model == hardware == pytest.approx(every.sum()) and hardware > 0


def test_a_forward_run_again_in_the_backward_counts_in_hfu_not_mfu(traces):
    trace = traces.ranks[0]
    model, _, every = flops(traces)
    again = gemm_ops(trace, "backward")[:2]
    checkpoint = int(trace.ops["op_id"].max()) + 1
    ops = trace.ops
    ops.loc[ops["op_id"].isin(again), "parent_op_id"] = checkpoint  # re-run inside the module's forward range
    row = ops[ops["op_id"] == again[0]].assign(
        op_id=checkpoint, parent_op_id=0, name=MODULE_RANGE_PREFIX + "model.layers.0.mlp"
    )
    trace.ops = pd.concat([ops, row], ignore_index=True)
    expected = trace.calls["op_id"].isin(again).to_numpy()
    assert (recomputed(trace) == expected).all()
    model_again, hardware_again, _ = flops(traces)
    assert hardware_again == pytest.approx(model)
    assert hardware_again - model_again == pytest.approx(every[expected].sum()) and every[expected].sum() > 0


def test_a_fused_attention_backward_counts_twice_its_forward_in_mfu_and_its_own_flops_in_hfu():
    """Megatron-LM's formula counts a backward as twice its forward; a fused attention backward also recomputes
    QK^T (2.5 forwards), which is hardware FLOPs: model FLOPs take 2 of its 2.5, a recomputed call none."""
    frame = pd.DataFrame(
        {
            "family": ["attention", "attention", "attention", "gemm", "attention"],
            "op": ["fa2_fwd_causal", "fa2_bwd_causal", "fa2_bwd_preprocess", "mm", "flex_bwd"],
            "recomputed": [False, False, False, True, False],
        }
    )
    forward = 8.0e9
    hardware = np.array([forward, 2.5 * forward, 0.0, 3.0e9, 5.0e9])
    assert model_flops_of(frame, hardware).tolist() == [forward, 2 * forward, 0.0, 0.0, 4.0e9]
