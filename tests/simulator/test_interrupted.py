"""`maya predict` on a capture a stop signal interrupted (run status `interrupted`): the ranks, stopped each at
its own point, are cut to the iterations all of them completed, and the prediction says so; with none
completed there is nothing to predict from."""

import pytest

from maya.simulator.predict import predict
from maya.simulator.trace_builder import TraceBuilder

ITERATION_NS = 1_000_000
INTERRUPTED = {"interrupted_by": "SIGTERM"}


def _run(path, iterations: dict[int, int], attrs=INTERRUPTED):
    """Two data-parallel ranks; rank r completed `iterations[r]` iterations (each a 1 ms kernel and an
    all-reduce, ended by a sync) and was stopped inside the next, after its kernel."""
    b = TraceBuilder(world_size=2)
    b.communicator("dp", [0, 1])
    for r, done in iterations.items():
        k = b.rank(r)
        for i in range(done + 1):
            k.iteration = i
            k.kernel(ITERATION_NS)
            if i < done:  # the last one was cut short
                k.allreduce("dp", 0, nelems=1)
                k.stream_sync()
    return b.write(path, status="interrupted", attrs=attrs)


@pytest.mark.slow
def test_an_interrupted_run_is_predicted_from_the_iterations_every_rank_completed(tmp_path):
    run = _run(tmp_path / "run", {0: 5, 1: 3})
    prediction = predict(run, durations="measured")
    assert prediction.iterations == 3  # rank 1 had begun its fourth: all keep three
    assert prediction.iteration_ns == pytest.approx(ITERATION_NS, rel=0.01)
    assert any("interrupted by SIGTERM" in note for note in prediction.notes), prediction.notes


@pytest.mark.slow
def test_ranks_whose_script_ended_before_the_signal_keep_their_last_iteration(tmp_path):
    """`interrupted_ranks` lists the ranks the signal stopped: when none was, nothing is cut."""
    run = _run(tmp_path / "run", {0: 3, 1: 3}, attrs={**INTERRUPTED, "interrupted_ranks": []})
    prediction = predict(run, durations="measured")
    assert prediction.iterations == 4  # the trailing kernel stays, its own iteration
    assert any("interrupted by SIGTERM" in note for note in prediction.notes), prediction.notes


def test_a_run_interrupted_before_a_rank_completed_an_iteration_is_an_error(tmp_path):
    run = _run(tmp_path / "run", {0: 2, 1: 0})
    with pytest.raises(ValueError, match="interrupted by SIGTERM before rank 1 completed a training iteration"):
        predict(run, durations="measured")


def test_an_interrupted_run_without_iterations_is_an_error(tmp_path):
    """No optimizer step and nothing repeated: the calls are one partial iteration."""
    b = TraceBuilder(world_size=1)
    b.rank(0).kernel(ITERATION_NS)
    run = b.write(tmp_path / "run", status="interrupted", attrs={"interrupted_by": "SIGINT"})
    with pytest.raises(ValueError, match="interrupted by SIGINT and rank 0's calls show no complete iteration"):
        predict(run, durations="measured")
