"""Hugging Face `Trainer` as users run it, under torchrun on 2 virtual H100s: DDP through accelerate and
DeepSpeed ZeRO-3 (its non-compiled paths: PyTorch's AdamW, no fused CUDA ops). FSDP and ZeRO-1/2 are rows of
`benchmarks/frameworks.py`."""

import pytest
from paths import WORKLOADS

from maya_trace_spec import Run

pytest.importorskip("accelerate")  # first: without it the module skips before importing transformers (~3 CPU-s)
pytest.importorskip("transformers")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("mode", ["ddp", "zero3"])
def test_trainer(mode, tmp_path, emulate_and_predict):
    options = ["--nproc-per-node", "2", "--iterations", "2"]
    if mode.startswith("zero"):
        # ZeRO-3 checks that ranks agree through broadcasts from rank 0 (`assert_ints_same_as_other_ranks`):
        # rank 1 receives rank 0's bytes through the emulator's mailbox, and passes
        pytest.importorskip("deepspeed")
    output, prediction = emulate_and_predict(
        tmp_path / "run", ["python", str(WORKLOADS / "hf_trainer.py"), "--mode", mode], *options
    )
    assert "stopped after 2 training iterations" in output
    assert "OVERFLOW" not in output  # a value only a GPU computes reads 0: no overflow, the step is taken
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0
    assert not [n for n in prediction["notes"] if n.startswith("SPMD assumed")]  # every rank ran
    if mode == "zero3":  # parameters are gathered before use and gradients reduce-scattered: in the trace
        names = set(Run(tmp_path / "run").table("api_calls").column("collective_name").drop_null().to_pylist())
        assert {"allgather", "reducescatter"} <= names, names
