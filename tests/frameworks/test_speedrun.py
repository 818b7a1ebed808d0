"""The modded-nanogpt speed-run script of 2024-10-14 ("ModernArch": GPT-2 124M, DDP on 8 H100s,
torch.compile with coordinate-descent tuning, Muon + AdamW, bf16 autocast), unchanged: it logs
`nvidia-smi`'s output, trains 5,100 steps and validates every 125, from step 0. `maya emulate --iterations 3`
stops it cleanly; each iteration holds both optimizers' steps (Muon's after AdamW's), so Muon's Newton-Schulz
function, compiled and tuned at its first call, is in iteration 0 with the model's compilation, and
iterations 1 and 2 are the steady state, call for call the same.

The script lives in the speed-run's repository, not a package: set MAYA_MODDED_NANOGPT_REPO to a checkout
of KellerJordan/modded-nanogpt (tested at f411b3d3, 2026-08-01) to run this test; it skips otherwise. Its
FineWeb shards are stood in for by random tokens in llm.c's format (`framework_assets.py`).
"""

import os
from pathlib import Path

import pytest
from framework_assets import write_fineweb_shards

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO_ENV = "MAYA_MODDED_NANOGPT_REPO"
SCRIPT = "records/track_1_short/2024-10-14_ModernArch/train_gpt2.py"


def test_speedrun_runs_unchanged_on_eight_h100s(tmp_path, emulate_and_predict):
    script = Path(os.environ.get(REPO_ENV, "")) / SCRIPT
    if not script.is_file():
        pytest.skip(f"set {REPO_ENV} to a checkout of KellerJordan/modded-nanogpt (its {SCRIPT})")
    root = write_fineweb_shards(tmp_path / "speedrun")
    output, prediction = emulate_and_predict(
        tmp_path / "run", ["python", str(script)], "--nproc-per-node", "8", "--iterations", "3", cwd=root
    )
    assert "stopped after 3 training iterations" in output
    assert "step:0/5100 val_loss" in output and "step:3/5100 train_loss" in output
    log = next((root / "logs").glob("*.txt")).read_text()
    smi = log.split("nvidia-smi:\n", 1)[1]
    assert smi.count("NVIDIA H100 80GB HBM3") == 8, smi[:2000]  # the virtual GPUs, as the real tool lists them
    # iteration 0 (validation, compilation and tuning) is not steady; what iteration 3 had begun is left out
    assert prediction["iterations"] == 3 and prediction["steady_iterations"] == 2
    assert prediction["world_size"] == 8 and 0 < prediction["mfu"] < 1
