"""`maya memory` and `maya.api.memory` on hand-written allocator histories in synthetic runs (no emulation): the
peak, the held bytes and overhead at it, each inferred category's rule, the allocating frame, the errors (no
run, no history, no history of the rank, a capped history, a pickle that is not plain data), the JSON shape and
`maya predict`'s note. `tests/emulator/test_memory_history.py` checks them on a real emulation."""

import json
import pickle

import pytest
from typer.testing import CliRunner

from maya import api
from maya.api.memory import NO_FRAME
from maya.api.memory_blocks import Blocks, round_size
from maya.cli import app
from maya.emulator.memory_history import FOLDER, OPTIMIZER_STEP, sidecar_path, snapshot_path
from maya_trace_spec import Run, RunWriter, TraceError, synthetic

runner = CliRunner()
TORCH = "/env/site-packages/torch"
SCRIPT = "/work/train.py"


def frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


def at(line: int) -> dict:
    """The script's own frame at `line`."""
    return frame(SCRIPT, line, "<module>")


BUILD = [frame(f"{TORCH}/nn/modules/module.py", 1098, "_apply"), frame(f"{TORCH}/nn/modules/module.py", 1100, "cuda")]
FORWARD = [
    frame(f"{TORCH}/nn/modules/linear.py", 134, "forward"),
    frame(f"{TORCH}/nn/modules/module.py", 1893, "_call_impl"),
]
STEP = [frame(f"{TORCH}/optim/adam.py", 179, "_init_group"), frame(f"{TORCH}/optim/optimizer.py", 567, "wrapper")]


def alloc(addr: int, size: int, frames: list, mark: str = "") -> dict:
    return {"action": "alloc", "addr": addr, "size": size, "frames": frames, "user_metadata": mark}


def free(addr: int, size: int, mark: str = "") -> dict:
    return {"action": "free_completed", "addr": addr, "size": size, "frames": [], "user_metadata": mark}


def segment(size: int) -> dict:
    return {"action": "segment_alloc", "addr": 1, "size": size, "frames": [], "user_metadata": ""}


STEP0 = f"{OPTIMIZER_STEP}0"
EVENTS = [
    segment(20 * 2**20),
    alloc(10, 4000, [*BUILD, at(5)]),  # a parameter: 4096 bytes
    alloc(11, 100, [frame("<frozen runpy>", 88, "_run_code"), at(7)]),  # the batch: other, 512 bytes
    alloc(12, 8192, [*FORWARD, at(8)]),  # an activation
    alloc(13, 4096, []),  # a gradient: still live when the step starts
    alloc(14, 2048, []),  # a backward temporary, freed before the step
    free(14, 2048),
    free(12, 8192),
    alloc(15, 8192, [*STEP, at(10)], STEP0),  # optimizer state: outlives the step
    alloc(16, 16384, [*STEP, at(10)], STEP0),  # the step's temporary: the peak, freed inside the step
    free(16, 16384, STEP0),
    free(13, 4096),  # zero_grad
    free(11, 100),
]
PEAK = {
    "parameters": 4096,
    "other": 512,
    "gradients": 4096,
    "optimizer state": 8192,
    "activations and temporaries": 16384,
}


def write_history(
    run,
    events,
    rank: int = 0,
    max_entries: int = 1000,
    peak: int | None = None,
    settings: dict | None = None,
    **sidecar,
) -> None:
    """`events` as rank `rank`'s snapshot in `run` (device 0; event i at `time_us` 10 i unless it says), `sidecar`'s
    items added to its sidecar, and `peak` as the trace's allocated peak."""
    folder = run / FOLDER
    folder.mkdir(exist_ok=True)
    timed = [{"time_us": 10 * i, **e} for i, e in enumerate(events)]
    snapshot = {"segments": [], "device_traces": [timed], "allocator_settings": settings or {}}
    snapshot_path(folder, rank).write_bytes(pickle.dumps(snapshot))
    sidecar = {
        "rank": rank,
        "max_entries": max_entries,
        "torch_paths": [TORCH],
        "library_paths": [TORCH, "/py/lib"],
        **sidecar,
    }
    sidecar_path(folder, rank).write_text(json.dumps(sidecar))
    if peak is not None:
        info = Run(run).info
        attrs = {
            **json.loads(info.get("attrs") or "{}"),
            "allocator_peaks": {str(rank): {"0": {"allocated_bytes": peak}}},
        }
        RunWriter(run).write("run", {k: [v] for k, v in {**info, "attrs": json.dumps(attrs)}.items()})


@pytest.fixture
def run(tmp_path):
    path = synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=60, ops_per_rank=6)
    write_history(path, EVENTS, peak=sum(PEAK.values()))
    return path


def test_the_peak_is_the_first_event_with_the_most_bytes_allocated_and_what_is_live_then(run):
    peak = api.peak_memory(run)
    assert (peak.rank, peak.device, peak.event, peak.events) == (0, 0, 9, len(EVENTS))
    assert peak.allocated_bytes == sum(PEAK.values()) == peak.trace_allocated_bytes
    assert peak.agrees is True
    assert (peak.held_bytes, peak.overhead_bytes) == (20 * 2**20, 20 * 2**20 - sum(PEAK.values()))
    assert {c: b for c, b, _ in peak.categories()} == PEAK
    assert (peak.reached_by.category, peak.reached_by.line, peak.reached_by.bytes) == (
        "activations and temporaries",
        10,
        16384,
    )


def test_each_allocation_is_named_by_its_innermost_frame_outside_torch_and_the_standard_library(run):
    holders = {h.category: (h.file, h.line, h.function) for h in api.peak_memory(run).holders}
    assert holders == {
        "activations and temporaries": (SCRIPT, 10, "<module>"),
        "optimizer state": (SCRIPT, 10, "<module>"),
        "gradients": (NO_FRAME, 0, ""),
        "parameters": (SCRIPT, 5, "<module>"),
        "other": (SCRIPT, 7, "<module>"),
    }


def test_with_no_optimizer_step_what_backward_allocates_is_a_gradient_if_never_freed_else_other(tmp_path):
    run = synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=60, ops_per_rank=6)
    write_history(run, [segment(2**20), alloc(1, 4096, []), alloc(2, 8192, []), free(2, 8192)])
    assert {c: b for c, b, _ in api.peak_memory(run).categories()} == {"other": 8192, "gradients": 4096}


SGD = [  # two iterations of plain SGD: its steps allocate nothing, so no event carries their mark
    segment(2**20),
    alloc(10, 4096, [*BUILD, at(5)]),  # the parameter
    alloc(12, 8192, [*FORWARD, at(8)]),  # an activation, freed in backward
    alloc(13, 4096, []),  # the gradient, kept until zero_grad after the step: the peak
    free(12, 8192),
    free(13, 4096),  # zero_grad(set_to_none=True), after the first step (time 42-44)
    alloc(12, 8192, [*FORWARD, at(8)]),  # iteration 2
    alloc(13, 4096, []),
    free(12, 8192),
    free(13, 4096),
]


def test_optimizer_steps_that_allocate_nothing_still_bound_the_gradients(tmp_path):
    """The rank's hooks keep each step's start and end: a gradient freed after a step (SGD's zero_grad) is a
    gradient even though no event is marked as inside a step."""
    run = synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=60, ops_per_rank=6)
    write_history(run, SGD, optimizer_steps=[[42, 44], [92, 94]])
    peak = api.peak_memory(run)
    assert peak.event == 3
    assert {c: b for c, b, _ in peak.categories()} == {
        "parameters": 4096,
        "activations and temporaries": 8192,
        "gradients": 4096,
    }
    write_history(run, SGD, optimizer_steps=[])  # no step ever: what backward allocated and freed is not told
    assert {c: b for c, b, _ in api.peak_memory(run).categories()}["other"] == 4096


def test_what_a_forward_allocates_and_keeps_past_the_next_step_is_other_and_ddps_own_say_so(tmp_path):
    ddp = frame(f"{TORCH}/nn/parallel/distributed.py", 1500, "_rebuild_buckets")
    events = [
        segment(2**20),
        alloc(10, 4096, [*FORWARD, at(8)]),  # a cache kept past the step
        alloc(11, 8192, [ddp, frame(f"{TORCH}/nn/parallel/distributed.py", 1600, "_pre_forward"), *FORWARD]),
        alloc(12, 2048, [*FORWARD, at(9)]),  # an activation, freed before the step
        free(12, 2048),
        free(10, 4096),  # after the step (time 50-52)
    ]
    run = synthetic.write_run(tmp_path / "run", world_size=1, calls_per_rank=60, ops_per_rank=6)
    write_history(run, events, optimizer_steps=[[45, 47]])
    holders = {(h.category, h.file, h.line, h.function): h.bytes for h in api.peak_memory(run).holders}
    assert holders == {
        ("other", f"{TORCH}/nn/parallel/distributed.py", 1500, "_rebuild_buckets"): 8192,
        ("other", SCRIPT, 8, "<module>"): 4096,
        ("activations and temporaries", SCRIPT, 9, "<module>"): 2048,
    }


@pytest.mark.parametrize(
    "events, message",
    [
        ([segment(2**20), alloc(1, 512, []), free(2, 512)], "event 2 frees 0x2, which no event allocated"),
        ([segment(2**20), alloc(1, 512, []), alloc(1, 512, [])], "event 2 allocates 0x1, which event 1 allocated"),
        ([alloc(1, 512, [])], "after event 0, 0 bytes are held and 512 allocated"),
    ],
    ids=["free of an unknown address", "address allocated twice", "held below allocated"],
)
def test_a_history_that_contradicts_itself_is_refused(run, events, message):
    write_history(run, events)
    with pytest.raises(api.UntrustedHistory, match=f"contradicts itself: {message}"):
        api.peak_memory(run)
    r = runner.invoke(app, ["memory", str(run)], env={"COLUMNS": "200"})
    assert r.exit_code == 1 and "contradicts itself" in r.output, r.output


def test_a_history_the_script_reconfigured_or_one_not_taken_is_refused_with_the_reason(run):
    call = {"function": "_record_memory_history", "time_us": 5, "args": [None], "kwargs": {}}
    write_history(run, EVENTS, script_calls=[call])
    with pytest.raises(api.UntrustedHistory, match=r"reconfigured or cleared it \(_record_memory_history\(None\)\)"):
        api.peak_memory(run)
    write_history(run, EVENTS, skipped="the rank was stopped by SIGTERM: its history was not taken")
    snapshot_path(run / FOLDER, 0).unlink()
    with pytest.raises(api.UntrustedHistory, match="rank 0 has no memory history: the rank was stopped by SIGTERM"):
        api.peak_memory(run)


def test_a_disagreement_with_the_trace_says_why_when_the_allocator_rounds_to_powers_of_two(run):
    write_history(run, EVENTS, peak=512)
    peak = api.peak_memory(run)
    assert not peak.agrees and peak.disagreement is None  # no reason known: the figures alone are shown
    write_history(run, EVENTS, peak=512, settings={"roundup_power2_divisions": {"1": 4, "2": 0}})
    assert api.peak_memory(run).disagreement == f"{sum(PEAK.values()) - 512:+,} bytes: " + (
        "the allocator setting roundup_power2_divisions rounds blocks in a way not modelled"
    )
    r = runner.invoke(app, ["memory", str(run)], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "roundup_power2_divisions" in r.output, r.output
    write_history(run, EVENTS, peak=sum(PEAK.values()), settings={"roundup_power2_divisions": {"1": 4}})
    assert api.peak_memory(run).disagreement is None  # they agree: nothing to explain


def test_blocks_count_the_allocators_rounding_and_the_remainder_too_small_to_split_off():
    assert [round_size(n) for n in (1, 512, 513, 4000, 2**20)] == [512, 512, 1024, 4096, 2**20]
    blocks = Blocks()
    blocks.map(0, 20 * 2**20)  # a large-pool segment
    assert blocks.allocate(0, 4 * 2**20) == 4 * 2**20  # 16 MiB left: split off
    assert blocks.allocate(4 * 2**20, 15 * 2**20 + 100) == 16 * 2**20  # 1 MiB - 512 left: the whole block
    blocks.free(0)
    assert blocks.allocate(0, 3 * 2**20) == 4 * 2**20  # the free block reaches the next live one: 1 MiB left
    apart = Blocks()  # two segments side by side: a block never spans both
    apart.map(0, 20 * 2**20)
    apart.map(20 * 2**20, 20 * 2**20)
    assert apart.allocate(0, 20 * 2**20 - 1000) == 20 * 2**20  # 512 bytes left in its own segment: not split
    expandable = Blocks({"expandable_segments": True})  # expandable segments split off any 512 bytes
    expandable.map(0, 20 * 2**20)
    assert expandable.allocate(0, 20 * 2**20 - 2**19) == 20 * 2**20 - 2**19
    small = Blocks()
    small.map(2**30, 2 * 2**20)  # a small-pool segment splits any remainder of 512 bytes or more
    assert small.allocate(2**30, 2**20) == 2**20
    assert small.allocate(2**30 + 2**20, 2**20 - 600) == 2**20 - 512


def test_a_peak_that_differs_from_the_traces_is_said(run):
    write_history(run, EVENTS, peak=sum(PEAK.values()) + 512)
    peak = api.peak_memory(run)
    assert peak.agrees is False
    r = runner.invoke(app, ["memory", str(run)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"the trace says {(sum(PEAK.values()) + 512) / 2**30:.3f} GiB" in r.output


def test_a_capped_history_is_refused_rather_than_a_wrong_peak(run):
    write_history(run, EVENTS, max_entries=len(EVENTS))
    with pytest.raises(api.CappedHistory, match=f"reached its cap of {len(EVENTS)} events"):
        api.peak_memory(run)


@pytest.mark.slow
def test_errors_name_the_run_the_flag_and_the_ranks(tmp_path, run):
    plain = synthetic.write_run(tmp_path / "plain", world_size=1, calls_per_rank=60, ops_per_rank=6)
    with pytest.raises(api.NoMemoryHistory, match="maya emulate --memory-history"):
        api.peak_memory(plain)
    with pytest.raises(api.NoMemoryHistory, match=r"no memory history of rank 3 \(ranks with one: \[0\]\)"):
        api.peak_memory(run, 3)
    with pytest.raises(TraceError):
        api.peak_memory(tmp_path / "missing")
    for args, message in (
        ([str(plain)], "maya emulate --memory-history"),
        ([str(tmp_path / "missing")], "no such run directory"),
        ([str(run), "--rank", "3"], "no memory history of rank 3"),
    ):
        r = runner.invoke(app, ["memory", *args], env={"COLUMNS": "200"})
        assert r.exit_code == 1 and message in r.output, r.output


def test_a_rank_deduplication_replayed_reads_the_history_of_the_rank_captured_for_it_and_says_so(run):
    info = Run(run).info
    attrs = {**json.loads(info.get("attrs") or "{}"), "represents": {"0": [0, 1, 2, 3]}}
    RunWriter(run).write("run", {k: [v] for k, v in {**info, "attrs": json.dumps(attrs)}.items()})
    peak = api.peak_memory(run, 2)
    assert (peak.rank, peak.replayed_from, peak.allocated_bytes) == (2, 0, sum(PEAK.values()))
    assert api.peak_memory(run, 0).replayed_from is None
    r = runner.invoke(app, ["memory", str(run), "--rank", "2"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "rank 2, replayed from rank 0's history" in r.output, r.output
    with pytest.raises(api.NoMemoryHistory, match="no memory history of rank 4"):
        api.peak_memory(run, 4)


def test_a_snapshot_that_is_not_plain_data_is_not_unpickled(run):
    snapshot_path(run / FOLDER, 0).write_bytes(pickle.dumps({"device_traces": [[Run]]}))
    with pytest.raises(pickle.UnpicklingError, match="plain data, not maya_trace_spec"):
        api.peak_memory(run)


def test_json_has_the_peak_the_categories_and_the_top_frames(run):
    r = runner.invoke(app, ["memory", str(run), "--json", "--top", "2"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert set(data) == {"run", "rank", "replayed_from", "device", "peak", "categories", "frames"}
    assert set(data["peak"]) == {
        "allocated_bytes",
        "trace_allocated_bytes",
        "agrees",
        "disagreement",
        "held_bytes",
        "overhead_bytes",
        "event",
        "events",
        "reached_by",
    }
    assert data["categories"][0] == {"category": "activations and temporaries", "bytes": 16384, "count": 1}
    assert [f["bytes"] for f in data["frames"]] == [16384, 8192]
    assert set(data["frames"][0]) == {"category", "file", "line", "function", "bytes", "count"}


def test_the_table_lists_categories_frames_and_the_overhead(run):
    r = runner.invoke(app, ["memory", str(run)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "equal to the trace's" in r.output and "overhead 20.0 MiB" in r.output
    assert f"{SCRIPT}:5 (<module>)" in r.output and "optimizer state" in r.output


def test_run_analysis_gives_the_holders_as_a_frame(run):
    frame = api.open_run(run).peak_holders()
    assert list(frame.columns) == ["rank", "category", "file", "line", "function", "bytes", "count"]
    assert frame.groupby("category")["bytes"].sum().to_dict() == PEAK


@pytest.mark.slow
def test_predict_points_at_maya_memory_when_the_run_has_snapshots(tmp_path, run):
    r = runner.invoke(app, ["predict", str(run)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert f"maya memory {run}" in r.output
    plain = synthetic.write_run(tmp_path / "plain", world_size=1, calls_per_rank=60, ops_per_rank=6)
    r = runner.invoke(app, ["predict", str(plain)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "maya memory" not in r.output
