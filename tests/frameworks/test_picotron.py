"""Hugging Face's picotron (4D parallelism on raw torch.distributed: DP with gradient buckets, TP, PP with its AFAB
and 1F1B engines, CP with ring attention), unchanged: its `create_config.py` writes the config, one field of which
(`dataset.name`) is edited to a local dataset, and its `train.py` runs under `maya emulate -- torchrun`. Its model
calls flash-attn (`flash_attn_func` on Maya's stand-in for the extension; the rotary embedding and RMSNorm are
flash-attn's Triton kernels). No Hub: the model directory, tokenizer, safetensors file and dataset are made here
(`framework_assets.picotron_assets`, a 2-layer model of width 256).

picotron is a repository, not a package: set MAYA_PICOTRON_REPO to a checkout of huggingface/picotron (tested at
59714b1, 2025-08-26). It calls transformers 4's `batch_encode_plus` and `config.rope_theta` (it pins 4.47), which
transformers 5 removed, so the test also needs transformers<5 with its hub client, tokenizers and datasets first on
PYTHONPATH (e.g. `uv pip install --target DIR --no-deps transformers==4.57.3 huggingface-hub==0.36.0
tokenizers==0.22.1 datasets==4.4.1`, then `PYTHONPATH=DIR`); it skips otherwise.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from framework_assets import PICOTRON_ENV, picotron_assets

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SIZES = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4}
"""A model of width 256 (head dimension 64, which flash-attn's kernels take) with 2 layers, one per pipeline stage."""


@pytest.fixture
def picotron(tmp_path) -> tuple[Path, Path]:
    """(the checkout, a working directory holding picotron's assets); skips without either requirement."""
    checkout = Path(os.environ.get(PICOTRON_ENV, ""))
    if not (checkout / "train.py").is_file() or not (checkout / "picotron").is_dir():
        pytest.skip(f"set {PICOTRON_ENV} to a checkout of huggingface/picotron")
    try:
        transformers = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("picotron needs transformers<5 on PYTHONPATH: see the docstring")
    if int(transformers.split(".")[0]) >= 5:
        pytest.skip(
            "picotron needs transformers<5 (batch_encode_plus, config.rope_theta) on PYTHONPATH: see the docstring"
        )
    return checkout, picotron_assets(tmp_path / "picotron", layers=2, vocab=2048, sizes=SIZES)


def write_config(checkout: Path, root: Path, name: str, *parallel: str) -> Path:
    """picotron's `create_config.py` run as its README does (it reads `template/` from the checkout), with the local
    model; then `dataset.name` set to the local dataset, the one field edited."""
    args = ["--out_dir", str(root / "configs"), "--exp_name", name, *parallel, "--model_name", str(root / "model")]
    args += ["--num_hidden_layers", "2", "--grad_acc_steps", "4", "--mbs", "2", "--seq_len", "256", "--hf_token", "-"]
    subprocess.run([sys.executable, "create_config.py", *args], cwd=checkout, check=True, capture_output=True)
    path = root / "configs" / name / "config.json"
    config = json.loads(path.read_text())
    config["dataset"]["name"] = str(root / "data")
    path.write_text(json.dumps(config, indent=4))
    return path


def p2p_calls(run: Path) -> dict[int, list[str]]:
    """Each captured rank's NCCL sends and receives, in order."""
    from maya.simulator.trace import load

    return {
        trace.rank: [api for api in trace.calls["api"] if api in ("ncclSend", "ncclRecv")]
        for trace in load(run).ranks.values()
    }


@pytest.mark.parametrize("engine", ["1f1b", "afab"])
def test_pipeline_engines_replay_their_exchanges(picotron, tmp_path, emulate_and_predict, engine):
    """PP 2, 4 micro-batches: each stage sends its activations or gradients and receives the other's (one
    `batch_isend_irecv` each), and the replay matches them without a deadlock."""
    checkout, root = picotron
    config = write_config(checkout, root, f"pp2-{engine}", "--pp", "2", "--pp_engine", engine)
    argv = ["torchrun", "--nproc_per_node", "2", str(checkout / "train.py"), "--config", str(config)]
    output, prediction = emulate_and_predict(tmp_path / "run", argv, "--iterations", "3", cwd=root)
    assert "stopped after 3 training iterations" in output
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0 and 0 < prediction["mfu"] < 1
    calls = p2p_calls(tmp_path / "run")
    assert sorted(calls) == [0, 1]  # a class per stage
    per_step = 3 * 4  # 3 iterations of 4 micro-batches, one activation and one gradient each
    assert calls[0].count("ncclSend") == calls[1].count("ncclRecv") == per_step
    assert calls[1].count("ncclSend") == calls[0].count("ncclRecv") == per_step


def test_ring_attention_replays_its_ring(picotron, tmp_path, emulate_and_predict):
    """CP 2: picotron's ring attention passes K and V around the ring (and dK, dV back) with `batch_isend_irecv` on
    the CP group, rank 1 doing the causal block rank 0 skips; both ranks are captured and replayed."""
    checkout, root = picotron
    config = write_config(checkout, root, "cp2", "--cp", "2")
    argv = ["torchrun", "--nproc_per_node", "2", str(checkout / "train.py"), "--config", str(config)]
    output, prediction = emulate_and_predict(tmp_path / "run", argv, "--iterations", "3", cwd=root)
    assert "stopped after 3 training iterations" in output
    assert prediction["world_size"] == 2 and prediction["iteration_ns"] > 0 and 0 < prediction["mfu"] < 1
    calls = p2p_calls(tmp_path / "run")
    assert sorted(calls) == [0, 1]
    assert calls[0].count("ncclSend") == calls[1].count("ncclRecv") > 0
