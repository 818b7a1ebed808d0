"""A run whose interior pipeline stages cannot be rebuilt when read (`simulator/trace.load`)."""

from types import SimpleNamespace

import pytest

from maya.simulator.notes import stage_rebuild_notes
from maya.simulator.trace import load
from maya.simulator.trace_builder import gpt_3d


@pytest.mark.slow
def test_a_run_that_cannot_be_rebuilt_fails_naming_it(tmp_path):
    """Attrs asking for stage 3 rebuilt from stage 1, whose exchanges (the synthetic job's, not Megatron's 1F1B)
    cannot be cut: `load` fails naming the run and what to do, not with the schedule's own error."""
    rebuild = {"stages": 6, "stride": 1, "from": 1, "checked": [2, 4], "microbatches": 3, "rebuilt": [3]}
    run = gpt_3d(1, 6, 1, layers=1, microbatches=3, iterations=2, hidden=64, seq=16).write(
        tmp_path / "run", attrs={"stage_rebuild": rebuild}
    )
    with pytest.raises(ValueError, match=r"^run \w+ \(.*run\): its interior pipeline stages cannot be rebuilt") as e:
        load(run)
    assert "follow neither the 1F1B schedule nor the interleaved one" in str(e.value) and "--no-dedup" in str(e.value)


INTERLEAVED = {"stages": 10, "stride": 1, "from": [1, 2], "checked": [7, 8], "schedule": "interleaved"}


@pytest.mark.parametrize(
    ("rebuild", "says"),
    [
        (
            {**INTERLEAVED, "microbatches": 40, "rebuilt": [3, 4, 5, 6], "rebuilt_ranks": [3, 4, 5, 6]},
            "interleaved stages rebuilt: pipeline stages 3-6 of 10 were not captured; each replays stage 1 (odd "
            "stages) or 2 (even ones)'s forwards and backwards of its 40 virtual micro-batches",
        ),
        (
            {**INTERLEAVED, "from": 1, "checked": [2, 8], "microbatches": 10, "rebuilt": [3], "rebuilt_ranks": [3]},
            "1F1B stages rebuilt: pipeline stages 3 of 10",
        ),
        (
            {**INTERLEAVED, "stages": 6, "checked": [3, 4], "microbatches": 12, "rebuilt": [], "reason": "none left"},
            "every pipeline stage was captured: none left",
        ),
    ],
)
def test_the_stage_rebuild_note_says_what_was_rebuilt_and_its_memory(rebuild, says):
    """The interleaved rebuild's note names both sources and its virtual micro-batches, and says the sources' longer
    warm-up holds more activations than the rebuilt stages' own (the 1F1B one does not); with nothing rebuilt it
    says why."""
    if rebuild.get("from") == 1:
        rebuild.pop("schedule")
    (note,) = stage_rebuild_notes(SimpleNamespace(attrs={"stage_rebuild": rebuild}))
    assert note.startswith(says)
    assert ("longer warm-up" in note) == (rebuild.get("schedule") == "interleaved" and bool(rebuild["rebuilt"]))
