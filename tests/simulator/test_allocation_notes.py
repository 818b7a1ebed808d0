"""The note on failed device allocations a job survived (`simulator/notes.out_of_memory`)."""

from types import SimpleNamespace

import pandas as pd

from maya.simulator.notes import out_of_memory


def test_failed_allocations_of_a_rebuilt_stage_are_counted_once():
    """Stages 3 and 4 rebuilt from stage 1 replay its memory events: its 2 failed allocations are reported once, for
    the captured rank, not again for each rank rebuilt from it."""
    memory = pd.DataFrame({"kind": ["alloc", "oom", "oom"]})
    ranks = {
        1: SimpleNamespace(memory=memory, device={}),
        3: SimpleNamespace(memory=memory, device={"rebuilt_from": 1}),
        4: SimpleNamespace(memory=memory, device={"rebuilt_from": 1}),
    }
    traces = SimpleNamespace(info={"status": "complete"}, ranks=ranks)
    failure, note = out_of_memory(traces, {r: (1, True) for r in ranks}, 1, SimpleNamespace(memory_bytes=2))
    assert failure is None
    assert note.startswith("2 device allocation(s) failed (rank 1: 2) and the script went on")
