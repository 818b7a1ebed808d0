"""PyTorch Lightning's Trainer as its users write it (`tests/workloads/lightning_lm.py`: Lightning's demo
Transformer, `accelerator="gpu", devices=2, strategy="ddp", precision="bf16-mixed"`), unchanged, on 2 virtual
H100s; `strategy="fsdp"` is a row of `benchmarks/frameworks.py`. Lightning sees torchrun's environment and
starts no processes of its own."""

import pytest
from framework_assets import write_wikitext
from paths import WORKLOADS

pytest.importorskip("lightning")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_lightning_trainer_ddp_bf16(tmp_path, emulate_and_predict):
    root = write_wikitext(tmp_path / "lightning")
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        ["python", str(WORKLOADS / "lightning_lm.py"), "--strategy", "ddp"],
        "--nproc-per-node",
        "2",
        "--iterations",
        "3",
        cwd=root,
    )
    assert "stopped after 3 training iterations" in output
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in output
    assert prediction["world_size"] == 2 and prediction["steady_iterations"] == 2
    for rank in prediction["ranks"]:
        assert rank["compute_ns"] > rank["exposed_comm_ns"] > 0, rank  # DDP's all-reduce, waited for
