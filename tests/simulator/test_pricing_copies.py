"""What pricing holds for a job's copies of a program (`simulator/pricing.py`, `topology.expand`, `engine`): each
copy's collectives priced on its own layout, equal times one array, equal keys one object."""

import numpy as np
import pandas as pd
import pytest

from maya.core import hardware
from maya.simulator.durations.estimated import CollectiveDurations
from maya.simulator.engine import _interned
from maya.simulator.iterations import detect
from maya.simulator.opcodes import COLL
from maya.simulator.pricing import Rows, Steps, Whole, _layouts, _patch, laid_out_frame, price
from maya.simulator.program import compile_rank
from maya.simulator.topology import expand
from maya.simulator.trace import load
from maya.simulator.trace_builder import gpt_3d


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """TP 2 x PP 2 x DP 4 on nodes of 3 GPUs, one capture per stage: a copy's tensor-parallel pair on one node or two."""
    run = gpt_3d(2, 2, 4, layers=1, microbatches=2, iterations=2, hidden=256, seq=64, gpus_per_node=3).write(
        tmp_path_factory.mktemp("job") / "run"
    )
    traces = load(run)
    programs = {rank: compile_rank(trace) for rank, trace in traces.ranks.items()}
    replicas, comms = expand(traces, programs)
    return traces, programs, replicas, comms


@pytest.mark.slow
def test_each_copy_is_priced_on_its_own_layout_and_equal_times_are_one_array(job):
    """Every copy's device times are those of pricing its whole program on its own layout (only the collectives
    laid out otherwise than its program's first copy are priced again), and a program's copies whose times come
    out equal share one array (nodes of 3 GPUs: some tensor-parallel pairs span two nodes)."""
    traces, programs, replicas, comms = job
    hw = hardware.get("a100-sxm-80gb")
    provider = CollectiveDurations("dgx-a100")
    iterations = {rank: detect(traces.ranks[rank], p.opcodes) for rank, p in programs.items()}
    devices = price(traces, replicas, comms, provider, hw, iterations=iterations)
    relaid = 0
    for replica, device in zip(replicas, devices):
        program = replica.program
        layouts = _layouts(program, replica, comms, traces)
        frame = laid_out_frame(program, traces, iterations[program.rank], layouts)
        whole = np.rint(np.maximum(provider.device_ns(frame, hw), 0)).astype(np.int64)
        coll = frame["opcode"].to_numpy() == COLL
        np.testing.assert_array_equal(device[coll], whole[coll])
        np.testing.assert_array_equal(device[~coll], program.device[~coll])
        relaid += device is not program.device
    assert relaid  # some copies are priced otherwise than their program's first
    for rank in programs:  # per program, one array per distinct set of times
        copies = [d for r, d in zip(replicas, devices) if r.program.rank == rank]
        assert len({id(d) for d in copies}) == len({d.tobytes() for d in copies}) < len(copies)


def test_equal_launch_keys_are_one_object(job):
    """A collective's launch keys are equal for the copies in its group (the data-parallel reduce-scatters): one
    object, as is a send's key at its two ends."""
    _, _, replicas, _ = job
    launches: dict[tuple, list[tuple]] = {}
    sends: dict[tuple, list[tuple]] = {}
    for replica in replicas:
        for keys in replica.keys:
            launches.setdefault(keys, []).append(keys)
            for entry in keys:
                if len(entry[0]) == 4:
                    sends.setdefault(entry, []).append(entry)
    assert any(len(alike) > 1 for alike in launches.values())
    assert all(all(keys is alike[0] for keys in alike) for alike in launches.values())
    assert sends and all(len(ends) == 2 and ends[0] is ends[1] for ends in sends.values())


@pytest.mark.parametrize(
    ("column", "base", "kind"),
    [
        (
            np.arange(1000, dtype=np.int64) * 7 + 5,
            np.r_[np.arange(500) * 7, np.arange(500) * 7].astype(np.int64),
            Steps,
        ),
        (
            np.r_[np.full(990, 1.5), [np.nan, -0.0, 2.0] * 3, [4.0]],
            np.r_[np.full(990, 1.5), [np.nan, 0.0, 2.5] * 3, [4.0]],
            Rows,
        ),
        (pd.array([1, None, 3] * 300 + [7], dtype="Int64"), pd.array([1, None, 3] * 300 + [None], dtype="Int64"), Rows),
        (
            pd.Series(["gemm", None] * 400 + ["copy"], dtype="str"),
            pd.Series(["gemm", None] * 400 + ["gemm"], dtype="str"),
            Rows,
        ),
        (
            pd.Series([(0, 1), None, ()] * 300, dtype=object),
            pd.Series([(0, 1), None, ()] * 299 + [(2,), (0, 1), None], dtype=object),
            Rows,
        ),
        (np.random.default_rng(0).random(1000), np.random.default_rng(1).random(1000), Whole),
        (np.arange(1000, dtype=np.int64), np.arange(1000, dtype=np.float64), Whole),
    ],
)
def test_a_patch_rebuilds_the_column_exactly_and_small(column, base, kind):
    """A rebuilt stage's column is kept as its difference from stage 1's, permuted: call numbers and times (one
    offset per moved piece) as steps, a few rows as rows (NaN, -0.0, NA, None and tuples told apart), a column
    that differs throughout or in its dtype whole; applied to the base, it gives the column bit for bit."""
    column, base = pd.Series(column), pd.Series(base)
    patch = _patch(column, base)
    assert isinstance(patch, kind)
    rebuilt = patch.apply(base)
    pd.testing.assert_series_equal(rebuilt, column, check_exact=True)
    if column.dtype.kind == "f":
        np.testing.assert_array_equal(rebuilt.to_numpy().view(np.uint64), column.to_numpy().view(np.uint64))
    if kind is not Whole:
        assert patch.nbytes < column.memory_usage(index=False) / 4
    assert _patch(column, column.copy()) is None


def test_interned_times_are_one_object_per_value():
    """The engine's time lists: the array's values, equal ones one object across lists."""
    numbers: dict[int, int] = {}
    a = _interned(np.array([10**9, 5, 10**9, 10**12], dtype=np.int64), numbers)
    b = _interned(np.array([10**12, 10**9], dtype=np.int64), numbers)
    assert a == [10**9, 5, 10**9, 10**12] and b == [10**12, 10**9]
    assert a[0] is a[2] is b[1] and a[3] is b[0]
