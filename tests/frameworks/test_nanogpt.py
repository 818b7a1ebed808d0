"""karpathy/nanoGPT's `train.py`, unchanged, as its README launches it: DDP with `torchrun --standalone
--nproc_per_node=4 train.py`, bf16 autocast, `estimate_loss` (eval_iters batches of both splits, the model in
eval mode) at step 0 on the master process only.

Rank 0 evaluates and the others wait for it at their first all-reduce. Before the emulator's polls found work
behind a collective running (native/completion.c), torch's process group skipped DDP's stream waits, the
replay ran ranks 1-3's optimizer steps before their gradients were reduced, and their steady iterations read
0 ms of compute and a whole iteration of exposed communication.

nanoGPT is a repository, not a package: set MAYA_NANOGPT_REPO to a checkout of karpathy/nanoGPT (tested at
3adf61e1) to run this test; it skips otherwise. Its datasets are stood in for by random tokens
(`framework_assets.nanogpt_assets`)."""

import os
from pathlib import Path

import pytest
from framework_assets import NANOGPT_ENV, nanogpt_assets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_nanogpt_ddp_on_four_gpus(tmp_path, emulate_and_predict):
    checkout = Path(os.environ.get(NANOGPT_ENV, ""))
    if not (checkout / "train.py").is_file():
        pytest.skip(f"set {NANOGPT_ENV} to a checkout of karpathy/nanoGPT")
    root = nanogpt_assets(tmp_path / "nanogpt", checkout)
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        [
            "torchrun",
            "--standalone",
            "--nproc_per_node=4",
            "train.py",
            "config/train_shakespeare_char.py",
            "--compile=False",
            "--gradient_accumulation_steps=4",
            "--eval_iters=20",
        ],
        "--iterations",
        "3",
        cwd=root,
    )
    assert "stopped after 3 training iterations" in output and "step 0: train loss" in output
    assert prediction["world_size"] == 4 and prediction["steady_iterations"] == 2
    for rank in prediction["ranks"]:  # every rank computes; communication is the all-reduce's, not a whole step
        assert rank["compute_ns"] > 10 * rank["exposed_comm_ns"], rank
    note = next(n for n in prediction["notes"] if n.startswith("evaluation passes are not in the steady state"))
    assert "rank 0, iteration 0" in note and "(40 model calls)" in note
