"""LitGPT's own pretraining entry point (`litgpt pretrain`, Lightning AI's LitGPT from PyPI), unchanged, on 2
virtual H100s: Pythia-14m from random weights, `TextFiles` over local text (tokenized by LitGPT with litdata and a
tokenizer made here), bf16-mixed, Fabric's FSDP (HYBRID_SHARD, which LitGPT picks for more than one device) and
`torch.compile`, as its users run it: `maya emulate --nproc-per-node 2 -- litgpt pretrain ... --devices 2`."""

import json
import os
import sys
from pathlib import Path

import pytest
from framework_assets import write_c4_test, write_tokenizer

pytest.importorskip("litgpt")
pytest.importorskip("litdata")  # LitGPT's `extra`: TextFiles tokenizes with it
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def litgpt_assets(root: Path) -> Path:
    """`root/data/part{0,1,2}.txt` (the first is LitGPT's validation split) and `root/tokenizer`."""
    corpus = write_c4_test(root / "corpus", documents=240)
    write_tokenizer(root / "tokenizer", corpus / "data.json")
    texts = [json.loads(line)["text"] for line in (corpus / "data.json").read_text().splitlines()]
    (root / "data").mkdir()
    for i in range(3):
        (root / "data" / f"part{i}.txt").write_text("\n\n".join(texts[i * 80 : (i + 1) * 80]))
    return root


def test_litgpt_pretrain_fsdp_on_two_gpus(tmp_path, monkeypatch, emulate_and_predict):
    root = litgpt_assets(tmp_path / "litgpt")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # its console script
    output, prediction = emulate_and_predict(
        tmp_path / "run",
        ["litgpt", "pretrain", "pythia-14m", "--data", "TextFiles", "--data.train_data_path", "data"]
        + ["--data.num_workers", "0", "--tokenizer_dir", "tokenizer", "--devices", "2", "--precision", "bf16-mixed"]
        + ["--train.max_steps", "5", "--train.micro_batch_size", "2", "--train.global_batch_size", "4"]
        + ["--train.max_seq_length", "256", "--logger_name", "csv", "--out_dir", "out"]
        + ["--eval.initial_validation", "false"],
        "--nproc-per-node",
        "2",
        "--iterations",
        "3",
        cwd=root,
    )
    assert "stopped after 3 training iterations" in output
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in output
    assert "All GPUs are fully connected via NVLink." in output  # its `nvidia-smi topo -m` check
    assert prediction["world_size"] == 2 and prediction["steady_iterations"] == 2
    for rank in prediction["ranks"]:
        assert rank["compute_ns"] > rank["exposed_comm_ns"] > 0, rank  # FSDP's all-gathers and reduce-scatters
