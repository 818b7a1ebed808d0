"""What `maya predict` says about a run's CUDA-event timings: an autotuner's choices, or a framework's statistics."""

from types import SimpleNamespace

import pandas as pd

from maya.simulator.device_time import timing_notes


def _traces(timed_in: list[str]) -> SimpleNamespace:
    """One rank whose `cudaEventElapsedTime` calls were made in ops named `timed_in`, answered by the roofline."""
    calls = pd.DataFrame(
        {"api": ["cudaEventElapsedTime"] * len(timed_in), "args": ['{"device_time_ns": 5}'] * len(timed_in)}
    )
    calls["op_id"] = range(len(timed_in))
    ops = pd.DataFrame({"op_id": range(len(timed_in)), "name": timed_in})
    attrs = {"device_time": {"options": {"hardware": "h100-sxm"}}, "device_time_answers": {"0": {"oracle": "roofline"}}}
    return SimpleNamespace(ranks={0: SimpleNamespace(calls=calls, ops=ops)}, attrs=attrs)


def test_ddps_own_timings_are_said_to_choose_nothing():
    """A DDP script's only timings are DDP's statistics of its passes: no autotuning to speak of."""
    [note] = timing_notes(_traces(["DistributedDataParallel.forward"] * 8), "h100-sxm")
    assert note == (
        "8 CUDA-event timings, all DDP's statistics of its own passes (DistributedDataParallel.forward): no kernel "
        "was chosen by timing"
    )


def test_timings_elsewhere_are_said_to_steer_autotuned_choices():
    [note] = timing_notes(_traces(["DistributedDataParallel.forward", "triton::autotune"]), "h100-sxm")
    assert note.startswith("2 of 2 CUDA-event timings read Maya's estimate (roofline), not host time (timed in")
    assert "autotuned choices" in note
