"""torchtitan 0.3.0 as its users run it (`python -m torchtitan.train --module llama3 --config ...`), in a
working directory of synthetic assets (`assets.py`): its debug model on 8 virtual H100s with FSDP2 x TP
and its own defaults (CUDA graphs), validating every step on the synthetic `c4_test` (the validator
divides by a token count it reads from the device: the emulator computes it from the labels, through the
functional all-reduce whose `wait_tensor` goes through an AsyncCollectiveTensor)."""

import re

import pytest
from framework_assets import torchtitan_assets

pytest.importorskip("torchtitan")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_debug_model_fsdp_tp_with_validation(tmp_path, emulate_and_predict):
    root = torchtitan_assets(tmp_path / "titan")
    argv = [
        "python",
        "-m",
        "torchtitan.train",
        "--module",
        "llama3",
        "--config",
        "llama3_debugmodel",
        "--training.steps",
        "10",
        "--parallelism.data_parallel_shard_degree",
        "4",
        "--parallelism.tensor_parallel_degree",
        "2",
        "--validator.enable",
        "--validator.freq",
        "1",
        "--validator.steps",
        "1",
        "--validator.dataloader.dataset",
        "c4_test",
    ]
    output, prediction = emulate_and_predict(
        tmp_path / "run", argv, "--nproc-per-node", "8", "--iterations", "2", cwd=root
    )
    assert "stopped after 2 training iterations" in output
    assert re.search(r"validate step:\s+1\s.*loss", output), output[-3000:]
    assert prediction["world_size"] == 8 and prediction["iteration_ns"] > 0
    assert prediction["mfu"] > 0  # the steady iteration is a training step, not the stopped one's start
