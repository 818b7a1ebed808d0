"""LinkedIn's Liger-Kernel as transformers' users turn it on (`TrainingArguments(use_liger_kernel=True)`), unchanged, on
one virtual H100: its user Triton kernels (RMSNorm, RoPE, SwiGLU, the fused linear cross-entropy's) are launched,
described with the tensors they read and write, and priced as the kernels of the same work, none at the bandwidth of
the spec sheet."""

import json

import pytest
from paths import WORKLOADS

pytest.importorskip("accelerate")
pytest.importorskip("transformers")
pytest.importorskip("liger_kernel")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LIGER_KERNELS = {
    "_rms_norm_forward_kernel": "normalization",
    "_rms_norm_backward_kernel": "normalization",
    "_triton_rope": "elementwise",
    "_swiglu_forward_kernel": "elementwise",
    "_swiglu_backward_kernel": "elementwise",
    "liger_cross_entropy_kernel": "elementwise",
    "element_mul_kernel": "elementwise",
}
"""Each kernel of a Llama step with `use_liger_kernel=True` and the family it is priced as."""


def test_trainer_with_liger_kernels(tmp_path, emulate_and_predict):
    from maya.simulator.opcodes import classify
    from maya.simulator.trace import load
    from maya.simulator.work import work_frame

    output, prediction = emulate_and_predict(
        tmp_path / "run", ["python", str(WORKLOADS / "hf_trainer.py"), "--liger", "--steps", "3"], "--iterations", "2"
    )
    assert "stopped after 2 training iterations" in output
    assert prediction["iteration_ns"] > 0
    assert any("launches of user Triton kernels are priced" in note for note in prediction["notes"])
    trace = load(tmp_path / "run").ranks[0]
    names = dict(zip(trace.kernels["kernel_id"], trace.kernels["name"]))
    frame = work_frame(trace, classify(trace.calls))
    frame["kernel"] = trace.calls["kernel_id"].map(names)
    liger = frame[frame["kernel"].isin(list(LIGER_KERNELS))]
    assert set(liger["kernel"]) == set(LIGER_KERNELS)
    assert (liger["family"] == liger["kernel"].map(LIGER_KERNELS)).all()  # none left as "other"
    assert liger["op"].str.startswith("inductor_").all() and (liger["work_bytes"] > 0).all()
    rope = json.loads(trace.calls["args"][frame.index[frame["kernel"] == "_triton_rope"][0]])["triton"]
    access = {a["name"]: a.get("access") for a in rope["args"] if "shape" in a}
    assert (access["q_ptr"], access["k_ptr"], access["cos"]) == ("read-write", "read-write", "read")  # in place
