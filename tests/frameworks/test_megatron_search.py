"""`maya search` over Megatron-LM's own `pretrain_gpt.py`: three points of the shipped space
(`benchmarks/workloads/megatron_gpt_space.yaml`, with docs/search.md's command), TP 2 with sequence parallelism and
selective recomputation, without a pipeline, with one and with one interleaved; their distributed-optimizer twins
derived by the pruning rule; model FLOPs as Megatron-LM's own count.

Needs what `test_megatron_te.py` needs (MAYA_MEGATRON_LM, Python 3.12, Transformer Engine): sequence parallelism
needs Transformer Engine; it skips otherwise. About 3 CPU-minutes."""

import json
import shlex

import duckdb
import pytest
import yaml
from paths import REPO
from test_docs import marked_block
from typer.testing import CliRunner

from maya.cli.app import app
from maya.core import hardware

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHOSEN = {"tp": [2], "pp": [1, 2], "vp": [1, 2], "microbatches": [2], "recompute": ["selective"], "sp": [True]}
"""The shipped space cut to six points: three evaluated (no pipeline, PP 2, PP 2 with two virtual stages), three
derived (their distributed-optimizer twins)."""


def megatron_flops(h: int, layers: int, seq: int, batch: int, vocab: int, tp: int) -> float:
    """Megatron-LM's `num_floating_point_operations` for a dense GPT (4h MLP, no GQA or SwiGLU; causal attention
    counted half), its vocabulary padded to a multiple of 128 x TP as Megatron pads it."""
    padded = -(-vocab // (128 * tp)) * (128 * tp)
    per_token = 6 * h * 8 * h * layers + 24 * h * h * layers + 6 * h * padded
    return batch * seq * per_token + batch * seq * seq * 6 * h * layers


def test_search_over_megatron_knobs_runs_points_and_derives_twins(
    tmp_path, maya_home, monkeypatch, megatron_checkout_te
):
    checkout = megatron_checkout_te
    spec = yaml.safe_load((REPO / "benchmarks/workloads/megatron_gpt_space.yaml").read_text())
    for name, values in CHOSEN.items():
        spec["parameters"][name]["values"] = values
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(spec))
    command = shlex.split(marked_block("search.md", "megatron-search-command").replace("\\\n", " "))
    options = command[command.index("--cluster") : command.index("--")]
    script = command[command.index("--") :]
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.chdir(checkout)
    argv = ["search", "--space", str(space), *options, "--algorithm", "grid", "--out", str(tmp_path / "out"), *script]
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    con = duckdb.connect(str(maya_home / "warehouse.duckdb"), read_only=True)
    rows = con.execute("SELECT params, status, source, iteration_ns, mfu, command FROM search_points").fetchall()
    con.close()
    points = {json.loads(p)["pp"] * 10 + json.loads(p)["vp"] + 100 * json.loads(p)["dist_opt"]: r for p, *r in rows}
    evaluated = {k: v for k, v in points.items() if k < 100}
    assert sorted(evaluated) == [11, 21, 22] and all(v[:2] == ["ok", "evaluated"] for v in evaluated.values())
    for k, (_, _, ns, _, _) in evaluated.items():  # the twins reuse the figures they derive from
        assert points[k + 100][:3] == ["derived", "rule", ns] and ns > 0
    interleaved = json.loads(evaluated[22][4])
    assert interleaved[-7:] == [
        *("--num-virtual-stages-per-pipeline-rank", "2", "--micro-batch-size", "4"),
        *("--recompute-granularity", "selective", "--sequence-parallel"),
    ]
    model_flops = evaluated[22][3] * evaluated[22][2] * 1e-9 * 8 * hardware.get("a100-sxm-80gb").peak_flops("bf16")
    assert model_flops == pytest.approx(megatron_flops(6144, 8, 2048, 16, 32000, 2), rel=1e-3)
