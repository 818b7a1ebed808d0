"""Megatron-LM's own `pretrain_gpt.py` on 6 pipeline stages with 12 micro-batches a step (non-interleaved 1F1B):
stage 3 is rebuilt from stage 1's capture (stages 2 and 4 are checked against their own) (`emulator/dedup.py`, `core/pipeline_stages.py`) and the
prediction is that of every stage captured; on 8 stages of 2 model chunks (the interleaved schedule) stages 3 and 4
are rebuilt from stages 1 and 2 (stages 5 and 6 checked).

Needs MAYA_MEGATRON_LM (a Megatron-LM checkout, tested at `core_r0.19.0`) under Python 3.12, as
test_megatron_lm.py; it skips otherwise."""

from pathlib import Path

import pytest
from frameworks.test_megatron_lm import TINY_GPT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def pp6(tp: int = 1, stages: int = 6) -> list[str]:
    """TINY_GPT on `stages` x `tp` ranks, `stages` pipeline stages of 2 layers, `2 stages` micro-batches of 2 a step;
    bias-GeLU and bias-dropout unfused: Megatron compiles them with torch.compile, and the run that compiles first
    (cold cache) holds more memory than the one after it."""
    args = list(TINY_GPT)
    args[args.index("--num-layers") + 1] = str(2 * stages)
    args[args.index("--global-batch-size") + 1] = str(4 * stages)
    return [
        "torchrun",
        f"--nproc_per_node={stages * tp}",
        "pretrain_gpt.py",
        *args,
        "--pipeline-model-parallel-size",
        str(stages),
        "--tensor-model-parallel-size",
        str(tp),
        "--no-bias-gelu-fusion",
        "--no-bias-dropout-fusion",
    ]


@pytest.fixture
def checkout(megatron_checkout: Path) -> Path:
    return megatron_checkout


OPTIONS = ("--hardware", "a100-sxm-80gb", "--iterations", "3")


@pytest.mark.parametrize("tp", [1, 2])
def test_rebuilt_stages_predict_like_every_stage_captured(tmp_path, emulate_and_predict, checkout, monkeypatch, tp):
    """PP 6, and TP 2 x PP 6 (each tensor-parallel rank of stage 1 rebuilt for its counterpart in stage 3)."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron asks for it with tensor parallelism
    options = ("--nproc-per-node", str(6 * tp), *OPTIONS)
    output, rebuilt = emulate_and_predict(tmp_path / "rebuilt", pp6(tp), *options, cwd=checkout)
    assert "pipeline stage 3 of 6 not run: rebuilt from stage 1's capture" in " ".join(output.split())
    _, full = emulate_and_predict(tmp_path / "full", pp6(tp), *options, "--no-dedup", cwd=checkout)
    assert full["captured_ranks"] == 6 * tp and rebuilt["captured_ranks"] <= 5 * tp  # stages 0, 1, 2, 4 and 5
    assert rebuilt["iteration_ms"] == pytest.approx(full["iteration_ms"], rel=5e-3)
    assert max(r["peak_memory_bytes"] for r in rebuilt["ranks"]) == max(r["peak_memory_bytes"] for r in full["ranks"])
    assert any(n.startswith("1F1B stages rebuilt: pipeline stages 3 of 6") for n in rebuilt["notes"])


def test_interleaved_stages_rebuilt_predict_like_every_stage_captured(tmp_path, emulate_and_predict, checkout):
    """PP 8 with one layer a virtual stage (2 model chunks, 32 virtual micro-batches a step): 6 stages captured,
    stage 3 rebuilt from stage 1 and stage 4 from stage 2 (an even stage sends before it receives), stages 5 and 6
    checked against their own captures; the step and peak memory are those of every stage captured."""
    argv = [*pp6(stages=8), "--num-layers-per-virtual-pipeline-stage", "1"]
    options = ("--nproc-per-node", "8", *OPTIONS)
    output, rebuilt = emulate_and_predict(tmp_path / "rebuilt", argv, *options, cwd=checkout)
    assert (
        "pipeline stages 3-4 of 8 not run: rebuilt from stage 1 (odd stages) or 2 (even ones)'s capture in their interleaved order"
        in (" ".join(output.split()))
    )
    _, full = emulate_and_predict(tmp_path / "full", argv, *options, "--no-dedup", cwd=checkout)
    assert full["captured_ranks"] == 8 and rebuilt["captured_ranks"] == 6
    assert rebuilt["iteration_ms"] == pytest.approx(full["iteration_ms"], rel=5e-3)
    assert max(r["peak_memory_bytes"] for r in rebuilt["ranks"]) == max(r["peak_memory_bytes"] for r in full["ranks"])
    assert any(n.startswith("interleaved stages rebuilt: pipeline stages 3-4 of 8") for n in rebuilt["notes"])
