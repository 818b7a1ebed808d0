"""Hugging Face `Trainer` as users run it, under torchrun on 2 virtual H100s: DDP through accelerate and
DeepSpeed ZeRO-3 (its non-compiled paths: PyTorch's AdamW, no fused CUDA ops). FSDP and ZeRO-1/2 are rows of
`benchmarks/frameworks.py`."""
import pytest

from maya_trace_spec import Run
from paths import WORKLOADS

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("mode", ["ddp", "zero3"])
def test_trainer(mode, tmp_path, emulate_and_predict):
    options = ["--nproc-per-node", "2", "--iterations", "2"]
    if mode.startswith("zero"):
        pytest.importorskip("deepspeed")
        # ZeRO-3 checks that ranks agree through a broadcast from rank 0, which an isolated rank 1 receives as
        # its own data: rank 0 is captured alone (README: Frameworks)
        options += ["--ranks", "0"]
    output, prediction = emulate_and_predict(
        tmp_path / "run", ["python", str(WORKLOADS / "hf_trainer.py"), "--mode", mode], *options,
        predict=mode == "ddp")  # rank 0 alone does not stand for rank 1: maya predict refuses it (README)
    assert "stopped after 2 training iterations" in output
    assert "OVERFLOW" not in output  # a value only a GPU computes reads 0: no overflow, the step is taken
    if prediction is None:
        run = Run(tmp_path / "run")
        assert run.info["world_size"] == 2 and run.info["status"] == "complete"
    else:
        assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0
