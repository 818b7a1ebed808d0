"""Megatron-LM's own `pretrain_gpt.py`, unchanged, with context and expert parallelism on 8 GPUs, deduplicated and
with every rank captured: one capture per ring or all-to-all position (an exchange group, `emulator/dedup.py`)
stands for its class, and the step is that of every rank captured. (The 16-GPU runs of docs/emulator.md take over
5 minutes each on 2 CPU cores: these are their 8-GPU equivalents, one data-parallel replica fewer.)

Needs MAYA_MEGATRON_LM under Python 3.12; the context-parallel test also Transformer Engine (Megatron's context
parallelism needs TE's attention); they skip otherwise."""

from pathlib import Path

import pytest
from frameworks.test_megatron_matrix import COMMON, MOE

from maya_trace_spec import read_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LOCAL = "--transformer-impl local --no-persist-layer-norm --no-masked-softmax-fusion".split()
"""Megatron without Transformer Engine (`test_megatron_lm.TINY_GPT`'s flags)."""


def dedup_and_every_rank(tmp_path, emulate_and_predict, checkout: Path, argv: list[str]) -> tuple[dict, dict, dict]:
    """(deduplicated prediction, every rank's prediction, the deduplicated run's `devices.represents` by rank)."""
    options = ("--nproc-per-node", "8", "--iterations", "3")
    _, dedup = emulate_and_predict(tmp_path / "dedup", argv, *options, cwd=checkout)
    _, every = emulate_and_predict(tmp_path / "every", argv, *options, "--no-dedup", cwd=checkout)
    devices = read_table(tmp_path / "dedup", "devices").to_pydict()
    return dedup, every, dict(zip(devices["rank"], devices["represents"]))


def test_tp2_cp2_dp2_deduplicated_predicts_like_every_rank(
    tmp_path, emulate_and_predict, monkeypatch, megatron_checkout_te
):
    """TP 2 x CP 2 x DP 2 (rank = tp + 2 cp + 4 dp): one class per ring position, ranks 0 and 2 captured."""
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    argv = ["torchrun", "--nproc_per_node=8", "pretrain_gpt.py", *COMMON, "--bf16"]
    argv += ["--tensor-model-parallel-size", "2", "--context-parallel-size", "2"]
    dedup, every, represents = dedup_and_every_rank(tmp_path, emulate_and_predict, megatron_checkout_te, argv)
    assert represents == {0: [0, 1, 4, 5], 2: [2, 3, 6, 7]}
    assert (dedup["captured_ranks"], every["captured_ranks"]) == (2, 8)
    assert dedup["iteration_ms"] == pytest.approx(every["iteration_ms"], rel=5e-3)


def test_ep2_alltoall_deduplicated_predicts_like_every_rank(tmp_path, emulate_and_predict, megatron_checkout):
    """4 experts, EP 2 x DP 4 (expert data parallelism 4), the all-to-all dispatcher, Megatron's local layers (no
    Transformer Engine needed): one class per EP position of 4 ranks, not checked (each class is Megatron's expert
    data-parallel group, one of rank 0's groups: `dedup.checked`), so ranks 0 and 1 alone are captured."""
    argv = ["torchrun", "--nproc_per_node=8", "pretrain_gpt.py", *COMMON, *LOCAL, "--bf16", *MOE]
    argv += ["--moe-token-dispatcher-type", "alltoall"]
    dedup, every, represents = dedup_and_every_rank(tmp_path, emulate_and_predict, megatron_checkout, argv)
    assert represents == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}
    assert sorted(p.name for p in (tmp_path / "dedup" / "logs").iterdir()) == ["rank0.txt", "rank1.txt"]
    assert (dedup["captured_ranks"], every["captured_ranks"]) == (2, 8)
    assert dedup["iteration_ms"] == pytest.approx(every["iteration_ms"], rel=5e-3)
