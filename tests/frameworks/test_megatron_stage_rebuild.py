"""Megatron-LM's own `pretrain_gpt.py` on 6 pipeline stages with 12 micro-batches a step (non-interleaved 1F1B):
stages 3 and 4 are rebuilt from stage 1's capture (`emulator/dedup.py`, `core/pipeline_stages.py`) and the
prediction is that of every stage captured.

Needs MAYA_MEGATRON_LM (a Megatron-LM checkout, tested at `core_r0.19.0`) under Python 3.12, as
test_megatron_lm.py; it skips otherwise."""

import sys
from pathlib import Path

import pytest
from frameworks.test_megatron_lm import TINY_GPT

from maya.core import settings

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def pp6() -> list[str]:
    """TINY_GPT on 6 ranks, 6 pipeline stages of 2 layers, 24 sequences a step in 12 micro-batches of 2; bias-GeLU
    and bias-dropout unfused: Megatron compiles them with torch.compile, and the run that compiles first (cold cache)
    holds more memory than the one after it."""
    args = list(TINY_GPT)
    args[args.index("--num-layers") + 1] = "12"
    args[args.index("--global-batch-size") + 1] = "24"
    return [
        "torchrun",
        "--nproc_per_node=6",
        "pretrain_gpt.py",
        *args,
        "--pipeline-model-parallel-size",
        "6",
        "--no-bias-gelu-fusion",
        "--no-bias-dropout-fusion",
    ]


@pytest.fixture
def checkout() -> Path:
    path = Path(settings.MEGATRON_LM.get() or "")
    if sys.version_info < (3, 12) or not (path / "pretrain_gpt.py").is_file():
        pytest.skip("set MAYA_MEGATRON_LM to a Megatron-LM checkout, under Python 3.12")
    return path


OPTIONS = ("--nproc-per-node", "6", "--hardware", "a100-sxm-80gb", "--iterations", "3")


def test_rebuilt_stages_predict_like_every_stage_captured(tmp_path, emulate_and_predict, checkout):
    output, rebuilt = emulate_and_predict(tmp_path / "rebuilt", pp6(), *OPTIONS, cwd=checkout)
    assert "pipeline stages 3-4 of 6 not run: rebuilt from stage 1's capture" in " ".join(output.split())
    _, full = emulate_and_predict(tmp_path / "full", pp6(), *OPTIONS, "--no-dedup", cwd=checkout)
    assert rebuilt["captured_ranks"] == 4 and full["captured_ranks"] == 6
    assert rebuilt["iteration_ms"] == pytest.approx(full["iteration_ms"], rel=5e-3)
    assert max(r["peak_memory_bytes"] for r in rebuilt["ranks"]) == max(r["peak_memory_bytes"] for r in full["ranks"])
    assert any(n.startswith("1F1B stages rebuilt: pipeline stages 3-4 of 6") for n in rebuilt["notes"])
