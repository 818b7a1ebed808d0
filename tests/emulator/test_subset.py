"""Which ranks a subset's captures stand for (`maya emulate --ranks`, `emulator/subset.py`): an SPMD job's
uncaptured ranks replay the capture of their pipeline stage; a stage none of whose ranks was captured stays
unrepresented, so `maya predict` refuses it instead of replaying another stage's program."""

import json

import pyarrow as pa
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.emulator.subset import subset_represents
from maya_trace_spec import Run

runner = CliRunner()


def tables(p2p_group=None):
    """A rank's api_calls and communicators: one all-reduce on the world, and sends on `p2p_group`."""
    calls = pa.table(
        {
            "collective_name": ["all_reduce"] + (["send"] if p2p_group else []),
            "comm_id": ["pg:0"] + (["pg:1"] if p2p_group else []),
        }
    )
    comms = pa.table(
        {"comm_id": ["pg:0"] + (["pg:1"] if p2p_group else []), "ranks": [None] + ([p2p_group] if p2p_group else [])},
        schema=pa.schema([("comm_id", pa.string()), ("ranks", pa.list_(pa.int64()))]),
    )
    return calls, comms


def test_a_data_parallel_rank_stands_for_the_uncaptured():
    assert subset_represents(4, [0], *tables()) == ({0: [0, 1, 2, 3]}, {0: [1, 2, 3]})
    # its list starts at itself and follows the ranks cyclically
    assert subset_represents(4, [3], *tables()) == ({3: [3, 0, 1, 2]}, {3: [0, 1, 2]})
    # the lowest captured rank takes the uncaptured ones; the others stand for themselves
    assert subset_represents(4, [0, 1], *tables()) == ({0: [0, 2, 3], 1: [1]}, {0: [2, 3]})
    assert subset_represents(2, [0, 1], *tables()) == ({0: [0], 1: [1]}, {})


def test_an_uncaptured_pipeline_stage_stays_unrepresented():
    # 2 stages of 2 ranks (stage groups {0, 2} and {1, 3}: stride 2): rank 0 stands for its stage's rank 1 only
    represents, assumed = subset_represents(4, [0], *tables([0, 2]))
    assert represents == {0: [0, 1]} and assumed == {0: [1]}
    # read from rank 3's traffic, the stages are the same
    assert subset_represents(4, [2, 3], *tables([1, 3])) == ({2: [2], 3: [3]}, {})
    assert subset_represents(4, [1, 2], *tables([1, 3])) == ({1: [1, 0], 2: [2, 3]}, {1: [0], 2: [3]})


@pytest.mark.e2e
@pytest.mark.slow
def test_a_subset_of_a_data_parallel_job_is_predicted_with_a_note(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "emulate",
            "--out",
            str(out),
            "--nproc-per-node",
            "2",
            "--ranks",
            "1",
            "--",
            "python",
            str(WORKLOADS / "ddp_mlp.py"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert {d["rank"]: d["represents"] for d in Run(out).table("devices").to_pylist()} == {1: [1, 0]}
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    prediction = json.loads(p.stdout)
    assert prediction["world_size"] == 2
    assert any(n.startswith("SPMD assumed: 1 rank(s)") and "rank 1 for 0" in n for n in prediction["notes"])


@pytest.mark.e2e
@pytest.mark.slow
def test_a_pipeline_stage_alone_is_not_predicted(tmp_path):
    """Rank 0 of two pipeline stages: rank 1 runs (rank 0 waits for its metadata) but is not captured, and no
    capture stands for it."""
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "emulate",
            "--out",
            str(out),
            "--nproc-per-node",
            "2",
            "--ranks",
            "0",
            "--",
            "python",
            str(WORKLOADS / "pipeline_gpt.py"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert {d["rank"]: d["represents"] for d in Run(out).table("devices").to_pylist()} == {0: [0]}
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code != 0
    assert "neither captured nor represented" in str(p.output) + str(p.exception)
