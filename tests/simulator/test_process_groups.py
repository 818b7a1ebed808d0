"""Process groups as Megatron-LM builds and uses them, emulated on every rank and replayed by `maya predict`:
communicators split off the world, and point-to-point over the world group of torch's legacy process group."""

import json

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli.app import app

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
runner = CliRunner()


def emulate_and_predict(tmp_path, script: str, ranks: int) -> dict:
    """Every rank of `script` emulated (no deduplication), then predicted; the prediction's JSON."""
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        ["emulate", "--nproc-per-node", str(ranks), "--no-dedup", "--iterations", "2", "--out", str(out)]
        + ["--", "python", str(WORKLOADS / script)],
    )
    assert r.exit_code == 0, r.output
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    return json.loads(p.stdout)


def test_split_groups_leave_world_collectives_aligned(tmp_path):
    """Rank 0 joins one group more than rank 1; `ncclCommSplit` advanced the world communicator's collective
    sequence, so the ranks' world all-reduces no longer matched and the replay deadlocked."""
    prediction = emulate_and_predict(tmp_path, "split_groups.py", 2)
    assert [r["rank"] for r in prediction["ranks"]] == [0, 1]
    assert prediction["iteration_ms"] > 0


def test_world_point_to_point_of_the_legacy_process_group(tmp_path, monkeypatch):
    """An unbatched send over the world group of the legacy process group goes over a 2-rank communicator of
    the pair: its NCCL peer (0 or 1) was taken as a world rank, so rank 0 sent to rank 1, rank 1 to itself,
    and the replay deadlocked (on 8 ranks: "local GPUs (1, 1) are not distinct")."""
    monkeypatch.setenv("TORCH_DIST_USE_NCCL2", "0")
    prediction = emulate_and_predict(tmp_path, "world_p2p.py", 4)
    assert [r["rank"] for r in prediction["ranks"]] == [0, 1, 2, 3]
