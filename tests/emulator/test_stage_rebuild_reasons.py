"""Why interior pipeline stages are not rebuilt, said before or instead of a capture (`emulator/launcher.py`)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from maya.core import pipeline_stages
from maya.emulator import launcher

PIPE = pipeline_stages.Pipeline(8, 1)


def test_an_option_the_interleaved_rebuild_cannot_follow_is_named(monkeypatch):
    """Stage 1's capture follows no schedule: with `--no-overlap-p2p-communication` in the job's argv the refusal
    names it and why, else it is the schedule's own error."""
    table = SimpleNamespace(to_pandas=lambda: pd.DataFrame({"seq": [0]}))
    monkeypatch.setattr(launcher, "read_table", lambda *a: table)

    def split(*a):
        raise pipeline_stages.ScheduleError("stage 1's exchanges (R-, ...) follow neither")

    monkeypatch.setattr(pipeline_stages, "split", split)
    writer, captured = SimpleNamespace(run_dir=None), {1: (None, SimpleNamespace(status="complete"))}
    argv = ["pretrain_gpt.py", "--no-overlap-p2p-communication"]
    with pytest.raises(pipeline_stages.ScheduleError) as e:
        launcher._interleaved(writer, PIPE, captured, argv)
    assert str(e.value) == (
        "--no-overlap-p2p-communication: a steady step's forward and backward run with no exchange between them "
        "(stage 1's exchanges (R-, ...) follow neither)"
    )
    with pytest.raises(pipeline_stages.ScheduleError, match="^stage 1's exchanges"):
        launcher._interleaved(writer, PIPE, captured, ["pretrain_gpt.py"])


def test_interleaved_sources_must_run_the_same_step(monkeypatch):
    """Stages 1 and 2 each pass their check but read different warm-up constants (8 and 10): refused, naming both;
    the same step gives its virtual micro-batches."""
    steps = {1: (32, 8), 2: (32, 10)}
    monkeypatch.setattr(launcher, "_rebuild_checked", lambda writer, pipe, captured, rank, *a, **k: steps[rank])
    represents = {r: [r] for r in (0, 1, 2, 5, 6, 7)}
    with pytest.raises(pipeline_stages.ScheduleError, match=r"run different steps .*1: \(32, 8\), 2: \(32, 10\)"):
        launcher._rebuild_difference(None, PIPE, {}, represents, [1, 2], [5, 6])
    steps[2] = (32, 8)
    assert launcher._rebuild_difference(None, PIPE, {}, represents, [1, 2], [5, 6]) == 32
