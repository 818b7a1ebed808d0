"""Interior pipeline stages rebuilt from stage 1's capture (`emulator/dedup.py`, `core/pipeline_stages.py`,
`simulator/trace.rebuilt_stages`): Megatron-LM's non-interleaved schedule over plain point-to-point, 6 stages and
6 micro-batches a step (`workloads/pipeline_1f1b.py`), and its interleaved one, 8 stages of 2 chunks and 16
micro-batches, odd stages from stage 1 and even ones from stage 2 (`workloads/pipeline_interleaved.py`)."""

import gc
import json
import weakref

import numpy as np
import pandas as pd
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware, pipeline_stages
from maya.simulator import pricing, simulate, summarize
from maya.simulator.program import RebuiltProgram
from maya.simulator.trace import INTERRUPTED, RankTrace, RebuiltTrace, keep_complete_iterations, load
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()


def emulate(out, *flags, script_args=(), stages=6, workload="pipeline_1f1b.py"):
    r = runner.invoke(
        app,
        [
            "emulate",
            "--nproc-per-node",
            str(stages),
            *flags,
            "--out",
            str(out),
            "--",
            "python",
            str(WORKLOADS / workload),
            *script_args,
        ],
    )
    assert r.exit_code == 0, r.output
    return " ".join(r.output.split())


def attrs(run) -> dict:
    return json.loads(Run(run).table("run").column("attrs")[0].as_py())


def prediction(run):
    return summarize(simulate(load(run), hardware.get("h100-sxm"), "roofline"))


def test_rebuilt_stages_predict_like_every_stage_captured(tmp_path):
    """Stages 0, 1, 2, 4 and 5 are captured and stage 3 rebuilt from stage 1: the step is that of all 6 captured,
    the rebuilt stage's peak memory near its own (it is given stage 1's allocator segments: stage 1 holds more
    micro-batches in flight, but segments are allocated in 2 MiB steps, and stage 3's own capture grew one more),
    and `maya predict` says so."""
    output = emulate(tmp_path / "rebuilt")
    assert "pipeline stage 3 of 6 not run: rebuilt from stage 1's capture" in output
    emulate(tmp_path / "full", "--no-dedup")
    rebuild = attrs(tmp_path / "rebuilt")["stage_rebuild"]
    assert rebuild == {
        "stages": 6,
        "stride": 1,
        "from": 1,
        "checked": [2, 4],
        "microbatches": 6,
        "rebuilt": [3],
        "rebuilt_ranks": [3],
        "rule": pipeline_stages.rule_digest(),
    }
    traces = load(tmp_path / "rebuilt")
    assert sorted(traces.ranks) == [0, 1, 2, 3, 4, 5]
    assert {r: t.device.get("rebuilt_from") for r, t in traces.ranks.items()} == {3: 1} | {
        r: None for r in (0, 1, 2, 4, 5)
    }
    rebuilt, full = prediction(tmp_path / "rebuilt"), prediction(tmp_path / "full")
    assert rebuilt.captured_ranks == 5 and full.captured_ranks == 6
    assert rebuilt.iteration_ns == pytest.approx(full.iteration_ns, rel=1e-3)
    assert [r.iteration_ns for r in rebuilt.ranks] == pytest.approx([r.iteration_ns for r in full.ranks], rel=1e-3)
    peaks, full_peaks = ({r.rank: r.peak_memory_bytes for r in p.ranks} for p in (rebuilt, full))
    assert peaks[3] == pytest.approx(full_peaks[3], rel=0.05)  # 54 MiB rebuilt (stage 1's segments), 56 captured
    assert max(peaks.values()) == max(full_peaks.values())
    p = runner.invoke(app, ["predict", str(tmp_path / "rebuilt"), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    notes = json.loads(p.stdout)["notes"]
    assert any(n.startswith("1F1B stages rebuilt: pipeline stages 3 of 6 were not captured") for n in notes)


def test_interleaved_stages_rebuilt_predict_like_every_stage_captured(tmp_path):
    """8 stages interleaved: stages 0, 1, 2, 5, 6 and 7 captured (5 and 6 checked), stage 3 rebuilt from stage 1 and
    stage 4 from stage 2; every rank's step is that of all 8 captured, and `maya predict`'s note says so."""
    output = emulate(tmp_path / "rebuilt", stages=8, workload="pipeline_interleaved.py")
    assert "pipeline stages 3-4 of 8 not run: rebuilt from stage 1 (odd stages) or 2 (even ones)'s capture" in output
    emulate(tmp_path / "full", "--no-dedup", stages=8, workload="pipeline_interleaved.py")
    assert attrs(tmp_path / "rebuilt")["stage_rebuild"] == {
        "stages": 8,
        "stride": 1,
        "from": [1, 2],
        "checked": [5, 6],
        "schedule": "interleaved",
        "microbatches": 32,
        "rebuilt": [3, 4],
        "rebuilt_ranks": [3, 4],
        "rule": pipeline_stages.rule_digest(),
    }
    traces = load(tmp_path / "rebuilt")
    assert {r: t.device.get("rebuilt_from") for r, t in traces.ranks.items()} == {3: 1, 4: 2} | {
        r: None for r in (0, 1, 2, 5, 6, 7)
    }
    rebuilt, full = prediction(tmp_path / "rebuilt"), prediction(tmp_path / "full")
    assert rebuilt.captured_ranks == 6 and full.captured_ranks == 8
    assert [r.iteration_ns for r in rebuilt.ranks] == pytest.approx([r.iteration_ns for r in full.ranks], rel=1e-3)
    p = runner.invoke(app, ["predict", str(tmp_path / "rebuilt"), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    notes = json.loads(p.stdout)["notes"]
    assert any(n.startswith("interleaved stages rebuilt: pipeline stages 3-4 of 8") for n in notes)


@pytest.mark.parametrize(
    ("stages", "args", "reason"),
    [
        (
            6,
            ["--stages", "6", "--microbatches", "12"],
            "with 6 stages under the interleaved schedule every interior stage is a source (1, 2) or checked",
        ),
        (8, ["--overlap-grad-reduce"], "under the interleaved schedule --overlap-grad-reduce reduces a model chunk's"),
    ],
)
def test_interleaved_stages_not_rebuilt_say_why(tmp_path, stages, args, reason):
    """6 interleaved stages leave none to rebuild, and `--overlap-grad-reduce` (work placed by the stage) is refused
    by name before stage `P - 3` is captured: every stage is captured and `maya emulate` says why."""
    output = emulate(tmp_path / "run", stages=stages, workload="pipeline_interleaved.py", script_args=args)
    assert f"every pipeline stage captured: {reason}" in output
    assert sorted(load(tmp_path / "run").ranks) == list(range(stages))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--microbatches", "3"], "stage 3 makes exchanges R+S+ that stage 1 never makes"),
        (["--layers", "2,2,2,2,3,2"], "stage 4 rebuilt from rank 1's capture is not rank 4's: call "),
    ],
)
def test_stages_that_cannot_be_rebuilt_are_captured(tmp_path, args, reason):
    """3 micro-batches on 6 stages (stages 1 and 2 all warm-up and cool-down, so stage 2's check alone passes, but
    stage 3 has a steady state), or stage 4 with a layer more (stage 2 as stage 1): every stage is captured."""
    output = emulate(tmp_path / "run", script_args=args)
    assert f"every pipeline stage captured: {reason}" in output
    assert sorted(load(tmp_path / "run").ranks) == [0, 1, 2, 3, 4, 5]
    assert all("rebuilt_from" not in t.device for t in load(tmp_path / "run").ranks.values())


def test_an_uneven_stage_captures_every_stage_and_says_why(tmp_path):
    """Stage 2 with a layer more: stage 2 rebuilt from stage 1 is not stage 2's capture, so every stage is captured,
    and the run's attrs, `maya emulate` and `maya predict` say why."""
    output = emulate(tmp_path / "uneven", script_args=["--layers", "2,2,3,2,2,2"])
    assert "every pipeline stage captured: stage 2 rebuilt from rank 1's capture is not rank 2's: call " in output
    assert "rebuilt from rank 1's capture is not rank 2's" in attrs(tmp_path / "uneven")["stage_rebuild"]["refused"]
    assert sorted(load(tmp_path / "uneven").ranks) == [0, 1, 2, 3, 4, 5]
    p = runner.invoke(app, ["predict", str(tmp_path / "uneven"), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    notes = json.loads(p.stdout)["notes"]
    assert any(n.startswith("every pipeline stage was captured: interior stages could not be rebuilt") for n in notes)


def test_rebuilt_stages_are_held_once_and_predict_as_copies(tmp_path):
    """A rebuilt stage holds no tables of its own: its calls and its priced frame (stage 1's in its order, with what
    differs kept as small patches: call numbers and times as steps) are built on each read, one stage's at a time (reading stage 4's lets stage 3's go), and the prediction is, to the
    nanosecond and call by call, the one of the same stages built as copies of stage 1's tables (7 stages, 7
    micro-batches: stages 3 and 4 rebuilt, 2 and 5 checked)."""
    emulate(tmp_path / "rebuilt", script_args=["--stages", "7", "--microbatches", "7"], stages=7)
    traces = load(tmp_path / "rebuilt")
    assert isinstance(traces.ranks[3], RebuiltTrace) and isinstance(traces.ranks[4], RebuiltTrace)
    stage_3 = weakref.ref(traces.ranks[3].calls)
    assert traces.ranks[3].calls is stage_3()  # kept while it is the last read
    stage_4 = traces.ranks[4].calls  # building stage 4's lets stage 3's go
    gc.collect()
    assert stage_3() is None and len(stage_4)
    copies = load(tmp_path / "rebuilt")
    for rank in (3, 4):
        lazy = copies.ranks[rank]
        copies.ranks[rank] = RankTrace(
            rank, lazy.calls, lazy.ops, lazy.kernels, lazy.communicators, lazy.memory, dict(lazy.device)
        )
    h100 = hardware.get("h100-sxm")
    shared, copied = simulate(traces, h100, "roofline"), simulate(copies, h100, "roofline")
    assert isinstance(shared.programs[3], RebuiltProgram) and not isinstance(copied.programs[3], RebuiltProgram)
    assert shared.programs[3].derive.func is pricing._permuted  # stage 1's frame in stage 3's order, not re-priced
    _, order, patches = shared.programs[3].derive.args  # what it holds: its recipe's order and small patches
    assert not isinstance(order, np.ndarray) and np.array_equal(order(), traces.ranks[3].order())
    frame_bytes = copied.programs[3].frame.memory_usage(index=False).sum()
    assert patches and sum(p.nbytes for p in patches.values()) < frame_bytes / 20
    assert {"seq", "start_ns"} <= set(patches) and isinstance(patches["seq"], pricing.Steps)
    frame_3 = weakref.ref(shared.programs[3].frame)
    pd.testing.assert_frame_equal(shared.programs[4].frame, copied.programs[4].frame)
    gc.collect()
    assert frame_3() is None
    pd.testing.assert_frame_equal(shared.programs[3].frame, copied.programs[3].frame)
    for ours, theirs in zip(shared.results, copied.results):
        assert ours.rank == theirs.rank
        np.testing.assert_array_equal(ours.end, theirs.end)
        np.testing.assert_array_equal(ours.issue, theirs.issue)
    assert summarize(shared).to_dict() | {"simulation_s": 0} == summarize(copied).to_dict() | {"simulation_s": 0}
    # an interrupted capture is cut to its complete iterations: a rebuilt stage is cut as a copy of its tables
    # (rebuilt from stage 1's uncut calls), as a stage built as a copy is
    cut, cut_copies = load(tmp_path / "rebuilt"), load(tmp_path / "rebuilt")
    for rank in (3, 4):
        lazy = cut_copies.ranks[rank]
        cut_copies.ranks[rank] = RankTrace(
            rank, lazy.calls, lazy.ops, lazy.kernels, lazy.communicators, lazy.memory, dict(lazy.device)
        )
    for run in (cut, cut_copies):
        run.info["status"] = INTERRUPTED
        keep_complete_iterations(run)
    for rank in (3, 4):
        assert not isinstance(cut.ranks[rank], RebuiltTrace)
        assert len(cut.ranks[rank].calls) < len(copies.ranks[rank].calls)
        pd.testing.assert_frame_equal(cut.ranks[rank].calls, cut_copies.ranks[rank].calls)
        pd.testing.assert_frame_equal(cut.ranks[rank].ops, cut_copies.ranks[rank].ops)
