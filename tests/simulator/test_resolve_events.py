"""`program._resolve_events` (vectorised): records numbered in call order, each wait on the latest record of its event
before it, calls without an event id made no-ops (an event synchronise a device synchronise), equal to the loop
over the calls it replaced."""

import numpy as np
import pandas as pd

from maya.simulator.opcodes import DEVICE_SYNC, EVENT_SYNC, NOP, RECORD, WAIT, WORK
from maya.simulator.program import _resolve_events


def one_by_one(event_ids: np.ndarray, ops: np.ndarray, arg: np.ndarray) -> int:
    latest: dict[float, int] = {}
    records = 0
    for i in np.flatnonzero(np.isin(ops, (RECORD, WAIT, EVENT_SYNC))):
        if np.isnan(event_ids[i]):
            ops[i] = DEVICE_SYNC if ops[i] == EVENT_SYNC else NOP
        elif ops[i] == RECORD:
            latest[event_ids[i]] = arg[i] = records
            records += 1
        else:
            arg[i] = latest.get(event_ids[i], -1)
    return records


def test_events_resolve_as_call_by_call():
    ops = np.array([WAIT, RECORD, RECORD, WAIT, EVENT_SYNC, RECORD, WAIT, EVENT_SYNC, WORK, RECORD])
    events = pd.array([1, 1, 2, None, 1, 1, 2, None, None, 3], dtype="Int64")
    arg = np.zeros(len(ops), dtype=np.int64)
    assert _resolve_events(pd.DataFrame({"event_id": events}), ops, arg) == 4
    assert arg.tolist() == [-1, 0, 1, 0, 0, 2, 1, 0, 0, 3]
    assert ops.tolist() == [WAIT, RECORD, RECORD, NOP, EVENT_SYNC, RECORD, WAIT, DEVICE_SYNC, WORK, RECORD]
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 80))
        ops = rng.choice([RECORD, WAIT, EVENT_SYNC, WORK], n)
        events = pd.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 6, n)).tolist(), dtype="Int64")
        calls = pd.DataFrame({"event_id": events})
        mine, theirs = (ops.copy(), np.full(n, 7)), (ops.copy(), np.full(n, 7))
        expected = one_by_one(calls["event_id"].to_numpy(dtype="float64", na_value=np.nan), *theirs)
        assert _resolve_events(calls, *mine) == expected
        assert mine[0].tolist() == theirs[0].tolist() and mine[1].tolist() == theirs[1].tolist()
