"""The note on interior pipeline stages rebuilt from stage 1's capture (`simulator/notes.stage_rebuild_notes`)."""

import json
from pathlib import Path

import pytest

from maya.simulator.notes import stage_rebuild_notes
from maya.simulator.trace import TraceSet


def traces(rebuild: dict) -> TraceSet:
    return TraceSet("run", Path("run"), {"attrs": json.dumps({"stage_rebuild": rebuild})}, {})


@pytest.mark.parametrize(("checked", "said"), [([2, 62], "stages 2 and 62 rebuilt"), (2, "stages 2 rebuilt")])
def test_the_note_names_the_checked_stages(checked, said):
    """Stages checked against their own captures are listed; a trace captured before stage P - 2 was checked too
    stores the one checked stage as a number (the 1T rows' traces), and reads as a list of it."""
    rebuild = {"stages": 64, "stride": 8, "from": 1, "checked": checked, "microbatches": 512, "rebuilt": [3, 4, 5]}
    (note,) = stage_rebuild_notes(traces(rebuild))
    assert note.startswith("1F1B stages rebuilt: pipeline stages 3-5 of 64 were not captured")
    assert f"({said} so were checked against their own captures" in note
