"""Interior 1F1B stages cut into exchanges and blocks and rebuilt for another stage (`core/pipeline_stages.py`), on
calls written as Megatron-LM's schedule issues them: each block a kernel of its own (micro-batch and direction), each
exchange a receive buffer's event, one NCCL group and a synchronise."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from maya.core import pipeline_stages
from maya.core.pipeline_stages import (
    INTERLEAVED_ORDER_OPTIONS,
    INTERLEAVED_SOURCES,
    INTERLEAVED_UNSUPPORTED,
    Pipeline,
    ScheduleError,
    check_rebuilds,
    difference,
    differing_stage_options,
    given_option,
    interleaved_schedule,
    launches_of,
    moved_communicators,
    rebuild,
    rebuilt_calls,
    rebuilt_difference,
    rule_digest,
    schedule,
    source,
    split,
)
from maya.simulator.trace import rebuilt_stages

STAGES, STRIDE, TP = 6, 2, 2
"""6 stages of 2 tensor-parallel ranks: rank `r` is in stage `r // 2`."""
PIPE = Pipeline(STAGES, STRIDE)


def _call(rows: list[dict], api: str, **columns) -> None:
    rows.append({"api": api, "start_ns": 1000 * len(rows), "duration_ns": 10, **columns})


def _communicators(stage: int) -> pd.DataFrame:
    """The pipeline's communicator and `stage`'s tensor-parallel one."""
    rank = stage * STRIDE
    return pd.DataFrame(
        {
            "comm_id": ["pipe", "tp"],
            "comm_size": [STAGES, TP],
            "ranks": [np.arange(0, STAGES * STRIDE, STRIDE), np.arange(rank, rank + TP)],
        }
    )


def stage_calls(
    stage: int,
    microbatches: int,
    steps: int = 2,
    extra: int | None = None,
    counted: bool = False,
    pattern: list[str] | None = None,
    grouped: bool = True,
    gathered: bool = False,
) -> tuple:
    """(calls, communicators, ops) of the first rank of interior `stage`: its 1F1B steps (`pattern`, default
    `schedule`'s), an optimizer kernel after each; micro-batch `extra`'s forward launches one kernel more (an uneven
    stage); with `counted`, each forward's token count is added by a kernel of its own, after the send in the
    warm-up, ending the forward in the steady state (as Megatron-LM does); without `grouped` each point-to-point
    operation is a launch of its own, not in an NCCL group, and the exchange's waits follow its launches; with
    `gathered`, a receive followed by another launch of its exchange is all-gathered in the tensor-parallel group
    between them (Megatron-LM's 2022 exchange, waited on there by the interleaved schedule)."""
    communicators = _communicators(stage)
    rows: list[dict] = []
    _call(rows, "cudaStreamCreate")
    pattern = pattern or schedule(STAGES, stage, microbatches, counted)
    for _ in range(steps):
        for event in pattern:
            if event[0] == "T":
                _call(rows, "cudaLaunchKernel", kernel_id=700, grid_x=1)
                continue
            if event[0] in "FB":
                kernel = (1 if event[0] == "F" else 100) + int(event[1:])
                _call(rows, "cudaLaunchKernel", kernel_id=kernel, grid_x=kernel)
                _call(rows, "ncclAllReduce", collective_name="all_reduce", comm_id="tp", in_msg_nelems=kernel)
                if extra is not None and event == f"F{extra}":
                    _call(rows, "cudaLaunchKernel", kernel_id=999, grid_x=1)
                if counted and event[0] == "F" and f"T{event[1:]}" not in pattern:
                    _call(rows, "cudaLaunchKernel", kernel_id=700, grid_x=1)
                continue
            launches = launches_of(event).split(",")
            for n, launch in enumerate(launches):
                if gathered and n and launches[n - 1].startswith("R"):
                    _call(rows, "ncclAllGather", collective_name="allgather", comm_id="tp", in_msg_nelems=20)
                _call(rows, "cudaEventRecordWithFlags", event_id=7)
                if grouped:
                    _call(rows, "ncclGroupStart")
                for op in (launch[i : i + 2] for i in range(0, len(launch), 2)):
                    peer = stage + (1 if op[1] == "+" else -1)
                    _call(rows, "ncclSend" if op[0] == "S" else "ncclRecv", peer_rank=peer, comm_id="pipe")
                    rows[-1]["collective_name"] = "send" if op[0] == "S" else "recv"
                    rows[-1]["in_msg_nelems"] = 10 if op[0] == "S" else 0
                    rows[-1]["out_msg_nelems"] = 0 if op[0] == "S" else 20
                if grouped:
                    _call(rows, "ncclGroupEnd")
                    _call(rows, "cudaEventQuery")
                    _call(rows, "cudaDeviceSynchronize")
            if not grouped:  # each launch's wait, after them all
                _call(rows, "cudaStreamWaitEvent", event_id=7)
                _call(rows, "cudaEventQuery")
        _call(rows, "cudaLaunchKernel", kernel_id=500, grid_x=500)
    ops = pd.DataFrame({"op_id": [0], "start_ns": [0], "end_ns": [5]})
    return _frame(rows), communicators, ops


def _frame(rows: list[dict]) -> pd.DataFrame:
    """`rows` as an `api_calls` table: every compared column present (numbers as nullable floats), numbered."""
    calls = pd.DataFrame(rows)
    for column in ("collective_name", "comm_id", "comm_dtype"):
        calls[column] = calls[column].astype(object) if column in calls else None
    for column in [*pipeline_stages.COMPARED[1:], "peer_rank", "event_id"]:
        if column not in ("collective_name", "comm_dtype"):
            calls[column] = pd.array(calls[column] if column in calls else [pd.NA] * len(calls), dtype="Float64")
    calls["seq"] = np.arange(len(calls))
    return calls


def rebuilt_from_stage_1(stage: int, microbatches: int, extra: int | None = None, counted: bool = False) -> str | None:
    """How stage `stage` rebuilt from stage 1's calls differs from the stage's own (None: not at all)."""
    calls, communicators, ops = stage_calls(1, microbatches, extra=extra, counted=counted)
    cut = split(calls, communicators, PIPE, 1)
    assert (cut.microbatches, cut.counted) == (microbatches, counted)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, stage)
    own, own_communicators, _ = stage_calls(stage, microbatches, counted=counted)
    return difference(rebuilt, moved, own, own_communicators, (NAMES, NAMES))


NAMES = {k: f"kernel {k}" for k in range(1000)}


def test_schedule_is_megatrons_warm_up_steady_state_and_cool_down():
    """Stage 1 of 6 with 6 micro-batches: 4 warm-up forwards, 2 (forward, backward) pairs, 4 cool-down backwards,
    each exchange named by its launches; every step makes 2M + 1 exchanges whatever the stage."""
    assert schedule(6, 1, 6) == (
        ["R-", "F0", "S+,R-", "F1", "S+,R-", "F2", "S+,R-", "F3", "S+,R-", "F4", "R+S+", "B0", "R-S-", "F5"]
        + ["R+S+", "B1", "S-,R+", "B2", "S-,R+", "B3", "S-,R+", "B4", "S-,R+", "B5", "S-"]
    )
    assert {len(schedule(6, s, 8)) for s in range(1, 5)} == {2 * 2 * 8 + 1}


@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("microbatches", [6, 8])
@pytest.mark.parametrize("stage", [2, 3, 4])
def test_every_interior_stage_is_stage_1_reordered(stage, microbatches, counted):
    """Each interior stage is stage 1's blocks in its own order, peers and tensor-parallel group moved; a token
    count after a warm-up send ends the forward where that forward is in the steady state."""
    assert rebuilt_from_stage_1(stage, microbatches, counted=counted) is None


def test_a_rebuild_moves_the_groups_and_peers():
    """Stage 3 rebuilt from stage 1: the tensor-parallel group is stage 3's ranks; the pipeline group (it spans the
    pipeline) is kept, with each peer's communicator rank that of stage 3's neighbour."""
    calls, communicators, ops = stage_calls(1, 6)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, split(calls, communicators, PIPE, 1), 3)
    assert moved["ranks"].map(list).tolist() == [[0, 2, 4, 6, 8, 10], [6, 7]]
    assert set(rebuilt["peer_rank"].dropna()) == {2, 4}
    assert (np.diff(rebuilt["start_ns"].to_numpy()) > 0).all()  # pieces moved in time as wholes, in order


def test_an_uneven_stage_is_told_apart():
    """Stage 1 with a kernel more in micro-batch 3's forward: stage 2 rebuilt from it is not stage 2, and the reason
    names the first call that differs."""
    reason = rebuilt_from_stage_1(2, 6, extra=3)
    assert reason == (
        "call 44 (polls left out): cudaLaunchKernel with api 'cudaLaunchKernel' rebuilt, cudaEventRecordWithFlags "
        "with 'cudaEventRecordWithFlags' captured"
    )


def test_another_schedule_is_refused():
    """Calls that do not follow 1F1B (here: exchanging with a stage two away) cannot be cut."""
    calls, communicators, _ = stage_calls(1, 6)
    calls.loc[calls["collective_name"] == "send", "peer_rank"] = 4.0
    with pytest.raises(ScheduleError, match="not a neighbour"):
        split(calls, communicators, PIPE, 1)
    calls, communicators, _ = stage_calls(1, 6)
    dropped = calls.index[calls["collective_name"] == "recv"][3]
    with pytest.raises(ScheduleError, match="1F1B"):
        split(calls.drop(dropped).reset_index(drop=True), communicators, PIPE, 1)


def test_too_few_micro_batches_for_the_steady_state_cannot_be_rebuilt():
    """With M = P - 2 micro-batches stage 1 has no steady state, so it never makes the combined exchanges stage 2
    needs: the rebuild refuses rather than invent them."""
    calls, communicators, ops = stage_calls(1, 4)
    cut = split(calls, communicators, PIPE, 1)
    with pytest.raises(ScheduleError, match="never makes"):
        rebuilt_calls(calls, communicators, PIPE, cut, 2)


MEGATRON_6_STAGES_7_MICRO_BATCHES = {
    1: ["R-", "F0", "S+,R-", "F1", "S+,R-", "F2", "S+,R-", "F3", "S+,R-", "F4", "R+S+", "B0", "R-S-", "F5", "R+S+"]
    + ["B1", "R-S-", "F6", "R+S+", "B2", "S-,R+", "B3", "S-,R+", "B4", "S-,R+", "B5", "S-,R+", "B6", "S-"],
    3: ["R-", "F0", "S+,R-", "F1", "S+,R-", "F2", "R+S+", "B0", "R-S-", "F3", "R+S+", "B1", "R-S-", "F4", "R+S+"]
    + ["B2", "R-S-", "F5", "R+S+", "B3", "R-S-", "F6", "R+S+", "B4", "S-,R+", "B5", "S-,R+", "B6", "S-"],
}
"""Stages 1 and 3 of 6 with 7 micro-batches, read off Megatron-LM's `forward_backward_pipelining_without_interleaving`
(`min(P - s - 1, M)` warm-up `recv_forward`/`send_forward`, a `recv_forward` before the steady state, each steady
step's `send_forward_recv_backward` and `send_backward_recv_forward` (`send_backward` the last), the cool-down's
`recv_backward`/`send_backward`), consecutive launches joined."""


def test_stage_3_rebuilt_from_stage_1_as_megatron_schedules_them():
    """Both stages' calls written from Megatron's schedule by hand (not `schedule`): stage 3 rebuilt from stage 1 is
    stage 3, and `schedule` agrees with the hand-written steps."""
    calls, communicators, ops = stage_calls(1, 7, pattern=MEGATRON_6_STAGES_7_MICRO_BATCHES[1])
    cut = split(calls, communicators, PIPE, 1)
    assert cut.microbatches == 7
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, 3)
    own, own_communicators, _ = stage_calls(3, 7, pattern=MEGATRON_6_STAGES_7_MICRO_BATCHES[3])
    assert difference(rebuilt, moved, own, own_communicators, (NAMES, NAMES)) is None
    assert {s: schedule(6, s, 7) for s in (1, 3)} == MEGATRON_6_STAGES_7_MICRO_BATCHES


@pytest.mark.parametrize("microbatches", [2, 3])
def test_micro_batches_between_2_and_p_minus_3_pass_stage_2_but_cannot_rebuild_every_stage(microbatches):
    """With 2 <= M <= P - 3 stages 1 and 2 are all warm-up and cool-down, so stage 2 rebuilds exactly, but stage 3 on
    have a steady state with the combined exchanges stage 1 never makes: `check_rebuilds` refuses."""
    assert rebuilt_from_stage_1(2, microbatches) is None
    calls, communicators, _ = stage_calls(1, microbatches)
    cut = split(calls, communicators, PIPE, 1)
    with pytest.raises(ScheduleError, match="never makes"):
        check_rebuilds(cut, STAGES)
    check_rebuilds(split(*stage_calls(1, 6)[:2], PIPE, 1), STAGES)  # enough for a steady state everywhere


def test_a_step_cut_short_is_the_tail():
    """Calls that end within a step (`maya emulate --iterations` stops a rank as its next iteration begins): the
    whole steps are cut as before, what follows is the tail, kept where it is by a rebuild."""
    calls, communicators, _ = stage_calls(1, 6, steps=3)
    exchanges = calls.index[calls["api"] == "cudaEventRecordWithFlags"]
    short = calls.iloc[: exchanges[len(exchanges) // 3 * 2 + 3]].reset_index(drop=True)
    cut = split(short, communicators, PIPE, 1)
    assert max(cut.step) == 1 and cut.labels[-1] == "tail"
    assert rebuild(cut, STAGES, 3)[-1] == cut.pieces[-1]


def test_a_group_without_its_members_cannot_be_moved():
    """A communicator whose members are not listed would keep stage 1's group on a rebuilt stage: refused."""
    _, communicators, _ = stage_calls(1, 6)
    communicators.at[1, "ranks"] = None
    with pytest.raises(ScheduleError, match="members are not listed"):
        moved_communicators(communicators, PIPE, 2)


def test_a_collective_over_another_group_is_told_apart():
    """Stage 2's tensor-parallel group listed with other members: its collectives differ from the rebuild's."""
    calls, communicators, ops = stage_calls(1, 6)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, split(calls, communicators, PIPE, 1), 2)
    own, own_communicators, _ = stage_calls(2, 6)
    own_communicators.at[1, "ranks"] = np.array([4, 9])
    reason = difference(rebuilt, moved, own, own_communicators, (NAMES, NAMES))
    assert reason is not None and "with group (4, 5) rebuilt, ncclAllReduce with (4, 9) captured" in reason


def test_event_waits_are_compared_by_the_record_they_wait_for():
    """A wait linked to another record is a difference; event ids numbered otherwise are not."""
    calls, communicators, _ = stage_calls(2, 6)
    syncs = calls.index[calls["api"] == "cudaDeviceSynchronize"]
    calls.loc[syncs, "api"] = "cudaStreamWaitEvent"
    calls.loc[syncs, "event_id"] = 7.0
    renumbered = calls.copy()
    renumbered["event_id"] = renumbered["event_id"] + 2
    assert difference(calls, communicators, renumbered, communicators, (NAMES, NAMES)) is None
    relinked = calls.copy()
    records = calls.index[calls["api"] == "cudaEventRecordWithFlags"]
    relinked.loc[records[records < syncs[3]][-1], "event_id"] = 8.0  # the fourth wait's exchange's record
    reason = difference(calls, communicators, relinked, communicators, (NAMES, NAMES))
    assert reason is not None and "waits_for" in reason


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["pretrain_gpt.py", "--pipeline-model-parallel-layout", "Et*3|(tt|)*5L"], "--pipeline-model-parallel-layout"),
        (["pretrain_gpt.py", "--moe-layer-freq=[0]*6+[1]*6"], "--moe-layer-freq=[0]*6+[1]*6"),
        (["pretrain_gpt.py", "--hybrid-override-pattern", "M-M*|M-M*"], "--hybrid-override-pattern M-M*|M-M*"),
        (["pretrain_gpt.py", "--moe-layer-freq", "2", "--hybrid-override-pattern", "M-M*"], None),
    ],
)
def test_options_that_can_make_stages_differ_are_found(argv, found):
    """Megatron-LM's options that can give stages different layers are named; their forms that cannot, not."""
    reason = differing_stage_options(argv)
    assert reason == found if found is None else reason.startswith(found.split("=")[0])


MEGATRON_INTERLEAVED_3_STAGES_STAGE_1 = (
    ["R-", "R-,S+", "R-,S+", "R-,S+", "R-,S+", "R-,S+,R+", "S+", "R+,S-", "R+,S-", "R+,S-", "R+,S-", "R+,S-", "S-"],
    ["F0", "F1", "F2", "F3", "F4", "F5", "B0", "B1", "B2", "B3", "B4", "B5"],
)
"""Stage 1 of 3 with 2 model chunks of 3 micro-batches (6 virtual ones, warm-up `2 (3 - 1 - 1) + (2 - 1) 3 = 5`)
read off `forward_backward_pipelining_with_interleaving` with `overlap_p2p_comm`: `recv_forward`, each warm-up
forward's `send_forward_recv_forward` (an odd stage receives first), the last one's `send_backward_recv_backward`
receive, one steady step (`send_forward_recv_forward` without a receive, `send_backward_recv_backward`), the
cool-down's `send_backward_recv_backward` (the last without a receive)."""


def interleaved_calls(stage: int, virtual: int = 24, extra: int = 6) -> tuple:
    """Interior `stage` of 6 under the interleaved schedule, each point-to-point operation a launch of its own."""
    return stage_calls(stage, 0, pattern=interleaved_schedule(STAGES, stage, virtual, extra), grouped=False)


def interleaved_rebuilt(source: int, stage: int) -> str | None:
    """How interior `stage` of 6 rebuilt from stage `source`'s interleaved calls differs from its own (None: not at
    all)."""
    calls, communicators, _ = interleaved_calls(source)
    cut = split(calls, communicators, PIPE, source)
    assert (cut.microbatches, cut.extra) == (24, 6)
    check_rebuilds(cut, STAGES)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, stage)
    own, own_communicators, _ = interleaved_calls(stage)
    return difference(rebuilt, moved, own, own_communicators, (NAMES, NAMES))


def test_interleaved_schedule_is_megatrons():
    """The interleaved schedule of stage 1 of 3 as Megatron-LM runs it (hand-written), and stage 2 of 4 the same
    with each exchange's launches the other way round (an even stage sends first)."""
    pattern = interleaved_schedule(3, 1, 6, 3)
    assert [launches_of(label) for label in pattern[::2]] == MEGATRON_INTERLEAVED_3_STAGES_STAGE_1[0]
    assert pattern[1::2] == MEGATRON_INTERLEAVED_3_STAGES_STAGE_1[1]
    even = interleaved_schedule(4, 2, 6, 3)
    assert [launches_of(label) for label in even[::2]] == [
        launches.replace("R-,S+", "S+,R-").replace("R+,S-", "S-,R+")
        for launches in MEGATRON_INTERLEAVED_3_STAGES_STAGE_1[0]
    ]
    with pytest.raises(ScheduleError, match="all 6 virtual micro-batches in its warm-up"):
        interleaved_schedule(6, 1, 6, 3)


@pytest.mark.parametrize(("source", "stage"), [(1, 3), (2, 4), (1, 1), (2, 2)])
def test_interleaved_interior_stages_are_their_parity_sources_reordered(source, stage):
    """6 stages, 2 model chunks of 12 micro-batches in groups of 6: stage 3 is stage 1's forwards and backwards in its
    own order, stage 4 stage 2's (and each source rebuilt for itself is itself)."""
    assert interleaved_rebuilt(source, stage) is None


def test_an_interleaved_stage_of_the_other_parity_is_not_rebuilt():
    """Stage 2 sends before it receives, stage 1 the other way round: stage 2 is never rebuilt from stage 1, and
    `check_rebuilds` of stage 1 checks its own parity only (stage 3)."""
    calls, communicators, _ = interleaved_calls(1)
    cut = split(calls, communicators, PIPE, 1)
    check_rebuilds(cut, STAGES)
    with pytest.raises(ScheduleError, match=r"makes exchanges w\^:S\+,R- that stage 1 never makes"):
        rebuild(cut, STAGES, 2)


def test_an_interleaved_stage_needing_exchanges_its_source_never_makes_is_refused():
    """Stage 1 with two steady steps makes no steady exchange between its first and last, which stage 3's four
    steady steps need: the rebuild refuses rather than invent one."""
    calls, communicators, _ = interleaved_calls(1, virtual=16)
    cut = split(calls, communicators, PIPE, 1)
    with pytest.raises(ScheduleError, match="never makes"):
        check_rebuilds(cut, STAGES)


def with_warm_up(calls: pd.DataFrame, autotuned: bool) -> pd.DataFrame:
    """`calls` with a kernel launched after their first call, as Megatron's JIT warm-up runs a fused function before
    training; `autotuned`: the autotuner's benchmark before it (a device sync and the kernel launched once more), as
    the rank that first compiles the function makes."""
    launch = calls.iloc[[1]].assign(api="cudaLaunchKernel", kernel_id=900.0, collective_name=None, comm_id=None)
    sync = launch.assign(api="cudaDeviceSynchronize", kernel_id=np.nan)
    warm_up = [sync, launch, launch] if autotuned else [launch]
    out = pd.concat([calls.iloc[:1], *warm_up, calls.iloc[1:]], ignore_index=True)
    out["seq"] = np.arange(len(out))
    return out


def test_the_check_leaves_out_what_precedes_the_first_exchange():
    """Stage 2's own capture autotuned a kernel before its first exchange (it reached the shared compile cache
    first), stage 1's did not: the rebuilt stage 2 still passes the check, which compares from the first exchange on;
    a difference after it (micro-batch 3's forward) is still found."""
    calls, communicators, _ = stage_calls(1, 6)
    calls = with_warm_up(calls, autotuned=False)
    cut = split(calls, communicators, PIPE, 1)
    own, own_communicators, _ = stage_calls(2, 6)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, 2)
    names = (NAMES, NAMES)
    autotuned = (with_warm_up(own, autotuned=True), own_communicators)
    assert "cudaDeviceSynchronize with 'cudaDeviceSynchronize' captured" in difference(
        rebuilt, moved, *autotuned, names
    )
    assert rebuilt_difference(calls, communicators, PIPE, cut, 2, autotuned, names) is None
    uneven = (with_warm_up(stage_calls(2, 6, extra=3)[0], autotuned=True), own_communicators)
    assert "cudaEventRecordWithFlags' rebuilt, cudaLaunchKernel with 'cudaLaunchKernel' captured" in rebuilt_difference(
        calls, communicators, PIPE, cut, 2, uneven, names
    )


@pytest.mark.parametrize(
    ("argv", "options", "found"),
    [
        (["pretrain_gpt.py", "--overlap-grad-reduce", "--bf16"], INTERLEAVED_ORDER_OPTIONS, "--overlap-grad-reduce"),
        (["pretrain_gpt.py", "--overlap-param-gather"], INTERLEAVED_ORDER_OPTIONS, "--overlap-param-gather"),
        (["pretrain_gpt.py", "--overlap-grad-reduce-x"], INTERLEAVED_ORDER_OPTIONS, None),
        (
            ["pretrain_gpt.py", "--no-overlap-p2p-communication"],
            INTERLEAVED_UNSUPPORTED,
            "--no-overlap-p2p-communication",
        ),
        (
            ["pretrain_gpt.py", "--overlap-p2p-comm-warmup-flush=true"],
            INTERLEAVED_UNSUPPORTED,
            "--overlap-p2p-comm-warmup-flush",
        ),
        (["pretrain_gpt.py", "--bf16"], INTERLEAVED_UNSUPPORTED, None),
    ],
)
def test_interleaved_options_are_named(argv, options, found):
    """The options that make the interleaved order depend on the stage, or follow no order `split` reads, are named
    as given (with or without a value); other options, or names that only begin like them, are not."""
    assert given_option(argv, options) == found


def test_the_schedule_is_found_from_one_step_s_length(monkeypatch):
    """`split`'s schedule search builds a few 1F1B patterns, not one per micro-batch count (quadratic: seconds a step
    for Megatron-LM's 530B interleaved rows), and still finds each 1F1B step and the interleaved one."""
    built = []
    original = pipeline_stages.schedule
    monkeypatch.setattr(pipeline_stages, "schedule", lambda *a: built.append(a) or original(*a))
    kinds = [launches_of(label) for label in interleaved_schedule(35, 1, 840, 70)[::2]] * 2
    assert pipeline_stages._schedule_of(kinds, 35, 1) == (840, False, 70)
    assert len(built) <= 3
    for stages, stage, microbatches, counted in ((6, 1, 6, False), (6, 2, 9, True), (8, 3, 2, True), (5, 3, 1, False)):
        step = [launches_of(label) for label in original(stages, stage, microbatches, counted)[::2]]
        built.clear()
        assert pipeline_stages._schedule_of(step * 3 + step[:2], stages, stage) == (
            microbatches,
            counted and min(stages - stage - 1, microbatches) > 0,
            None,
        )
        assert len(built) <= 3


def megatron_interleaved(stages: int, stage: int, chunks: int, microbatches: int, group: int) -> tuple[list, list]:
    """Interior `stage`'s step as `forward_backward_pipelining_with_interleaving` runs it with `overlap_p2p_comm`
    (Megatron-LM core_r0.19.0, written from its loop, not from `interleaved_schedule`): the blocks, and per exchange
    its launches (`L:`) and waits (`W:`) in order. Warm-up: `2 (stages - stage - 1) + (chunks - 1) group` forwards,
    each with its send and receive launched (odd stages receive first, `_p2p_ops`) and both waited for, the last also
    launching the first backward's receive; steady state: a forward waits for its receive before running, launches
    its send (and the next receive, but the last), waits for the previous send and the backward's receive; the
    backward likewise; cool-down: backwards whose launches are waited for at once; the step ends waiting for its last
    send."""
    total = chunks * microbatches
    warmup = min(2 * (stages - stage - 1) + (chunks - 1) * group, total)
    steady = total - warmup
    odd = stage % 2

    def forward(receive):
        return (["R-", "S+"] if odd else ["S+", "R-"]) if receive else ["S+"]

    def backward(receive):
        return (["R+", "S-"] if odd else ["S-", "R+"]) if receive else ["S-"]

    exchanges, blocks = [["L:R-", "W:R-"]], []
    pending_prev, pending_next, sent_next, sent_prev = 0, 0, False, False

    def block(name):
        blocks.append(name)
        exchanges.append([])

    for k in range(warmup):
        block(f"F{k}")
        exchanges[-1] += [f"L:{o}" for o in forward(True)] + [f"W:{o}" for o in forward(True)]
        if k == warmup - 1:
            exchanges[-1].append("L:R+")
            pending_next += 1
    for k in range(steady):
        if pending_prev:
            pending_prev -= 1
            exchanges[-1].append("W:R-")
        block(f"F{warmup + k}")
        ops = forward(k != steady - 1)
        exchanges[-1] += [f"L:{o}" for o in ops]
        if sent_next:
            exchanges[-1].append("W:S+")
        sent_next = True
        pending_prev += "R-" in ops
        if pending_next:
            pending_next -= 1
            exchanges[-1].append("W:R+")
        block(f"B{k}")
        exchanges[-1] += [f"L:{o}" for o in backward(True)]
        if sent_prev:
            exchanges[-1].append("W:S-")
        sent_prev = True
        pending_next += 1
    for k in range(steady, total):
        block(f"B{k}")
        ops = backward(k != total - 1)
        exchanges[-1] += [f"L:{o}" for o in ops] + [f"W:{o}" for o in ops]
    if sent_prev:
        exchanges[-1].append("W:S-")
    return exchanges, blocks


@pytest.mark.parametrize(
    ("stages", "chunks", "microbatches", "group"),
    [(8, 2, 16, 8), (9, 3, 18, 9), (12, 2, 36, 12), (12, 4, 24, 12), (10, 2, 20, 6)],
)
def test_interleaved_stages_rebuilt_from_their_parity_source_wait_as_megatron_s(stages, chunks, microbatches, group):
    """Each interior stage's step as Megatron-LM runs it (`megatron_interleaved`, launches and waits) is its parity
    source's exchanges reordered by `interleaved_schedule`'s labels: every stage's blocks and launches are the
    schedule's, and taking each label's exchanges from the source in turn gives the stage's own, waits included (a
    wrong warm-up length or parity puts an exchange with other launches or waits at some place)."""
    virtual, extra = chunks * microbatches, (chunks - 1) * group
    steps = {}
    for stage in range(1, stages - 1):
        exchanges, blocks = megatron_interleaved(stages, stage, chunks, microbatches, group)
        pattern = interleaved_schedule(stages, stage, virtual, extra)
        assert pattern[1::2] == blocks
        launched = [[o[2:] for o in exchange if o.startswith("L:")] for exchange in exchanges]
        assert [",".join(ops) for ops in launched] == [launches_of(label) for label in pattern[::2]]
        steps[stage] = list(zip(pattern[::2], exchanges))
    for stage, own in steps.items():
        by_label: dict[str, list] = {}
        for label, exchange in steps[source(stage, INTERLEAVED_SOURCES)]:
            by_label.setdefault(label, []).append(exchange)
        used: dict[str, int] = {}
        for at, (label, exchange) in enumerate(own):
            assert label in by_label, (stage, at, label)
            taken = by_label[label][used.get(label, 0) % len(by_label[label])]
            used[label] = used.get(label, 0) + 1
            assert taken == exchange, (stage, at, label)


def test_an_all_gather_between_an_exchange_s_launches_is_part_of_it():
    """Megatron-LM's 2022 exchange (1/TP received, all-gathered when waited on): a gather between two launches of an
    interleaved exchange belongs to it, so stage 3 rebuilt from stage 1 is its capture; one with device work beside
    it cuts the exchange, and the schedule is not read."""
    calls, communicators, _ = stage_calls(
        1, 0, pattern=interleaved_schedule(STAGES, 1, 24, 6), grouped=False, gathered=True
    )
    assert (calls["api"] == "ncclAllGather").sum() > 0
    cut = split(calls, communicators, PIPE, 1)
    assert (cut.microbatches, cut.extra) == (24, 6)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, 3)
    own, own_communicators, _ = stage_calls(
        3, 0, pattern=interleaved_schedule(STAGES, 3, 24, 6), grouped=False, gathered=True
    )
    assert difference(rebuilt, moved, own, own_communicators, (NAMES, NAMES)) is None
    gather = calls.index[calls["api"] == "ncclAllGather"][0]
    kernel = pd.DataFrame(
        [
            {
                **calls.loc[gather].to_dict(),
                "api": "cudaLaunchKernel",
                "collective_name": pd.NA,
                "comm_id": pd.NA,
                "kernel_id": 3.0,
                "grid_x": 3.0,
            }
        ]
    )
    worked = pd.concat([calls.iloc[: gather + 1], kernel, calls.iloc[gather + 1 :]], ignore_index=True)
    worked["seq"] = np.arange(len(worked))
    with pytest.raises(ScheduleError, match="follow neither"):
        split(worked, communicators, PIPE, 1)


def megatron_2022_calls(stage: int, steps: int = 2) -> tuple:
    """(calls, communicators) of interior `stage` of 6 (2 model chunks of 12 micro-batches in groups of 6) as
    Megatron-LM issues them with Maya's 2022 exchange: each launch and wait where `megatron_interleaved` puts it
    (an event record and a send or receive of its own, a stream wait), each receive's wait followed by the
    all-gather of its 1/TP chunk in the tensor-parallel group (at once in the blocking warm-up and cool-down
    exchanges, where the steady state waits: before the next block), each block a memset and its kernel (a layer
    norm's, as the forwards of korthikanti2022's row 2 begin), an optimizer kernel after each step."""
    exchanges, blocks = megatron_interleaved(STAGES, stage, 2, 12, 6)
    communicators = _communicators(stage)
    rows: list[dict] = []
    _call(rows, "cudaStreamCreate")
    for _ in range(steps):
        for k, exchange in enumerate(exchanges):
            for item in exchange:
                kind, op = item.split(":")
                if kind == "W":
                    _call(rows, "cudaStreamWaitEvent", event_id=7)
                    if op[0] == "R":
                        _call(rows, "ncclAllGather", collective_name="allgather", comm_id="tp", in_msg_nelems=20)
                    continue
                _call(rows, "cudaEventRecordWithFlags", event_id=7)
                peer = stage + (1 if op[1] == "+" else -1)
                send = op[0] == "S"
                _call(
                    rows,
                    "ncclSend" if send else "ncclRecv",
                    collective_name="send" if send else "recv",
                    peer_rank=peer,
                    comm_id="pipe",
                    in_msg_nelems=20 if send else 0,
                    out_msg_nelems=0 if send else 20,
                )
            if k < len(blocks):
                kernel = (1 if blocks[k][0] == "F" else 100) + int(blocks[k][1:])
                _call(rows, "cudaMemsetAsync", bytes=64)
                _call(rows, "cudaLaunchKernel", kernel_id=kernel, grid_x=kernel)
        _call(rows, "cudaLaunchKernel", kernel_id=500, grid_x=500)
    return _frame(rows), communicators


def rebuilt_2022(source: int, stage: int, own: pd.DataFrame | None = None) -> str | None:
    """How interior `stage` rebuilt from stage `source`'s 2022-exchange calls (`megatron_2022_calls`) differs from
    `own` (default: the stage's own calls; None: not at all)."""
    calls, communicators = megatron_2022_calls(source)
    cut = split(calls, communicators, PIPE, source)
    assert (cut.microbatches, cut.extra) == (24, 6)
    rebuilt, moved = rebuilt_calls(calls, communicators, PIPE, cut, stage)
    captured, captured_communicators = megatron_2022_calls(stage)
    return difference(rebuilt, moved, captured if own is None else own, captured_communicators, (NAMES, NAMES))


@pytest.mark.parametrize(("source", "stage"), [(1, 3), (2, 4)])
def test_the_2022_exchange_s_gathers_where_megatron_waits_are_rebuilt_call_for_call(source, stage):
    """A received chunk's all-gather after its exchange's last launch is part of that exchange, as the wait it
    follows: stage 1 gathers its warm-up forwards' receives at once (blocking), stage 3 gathers the same forwards'
    (its steady ones) when the next block's receive is waited on, both before the block's memset; a rebuild that kept
    the warm-up's gather with the forward put one gather too many before it (korthikanti2022 row 2: "ncclAllGather
    rebuilt, cudaMemsetAsync captured")."""
    calls, _ = megatron_2022_calls(source)
    gathers = calls.index[calls["api"] == "ncclAllGather"]
    api = calls["api"].where(calls["api"] != "cudaStreamWaitEvent")
    assert (api.shift(-1).bfill()[gathers] == "cudaMemsetAsync").any()  # a block follows a gather but waits
    assert rebuilt_2022(source, stage) is None


@pytest.mark.slow
def test_a_stage_that_gathers_elsewhere_is_still_refused():
    """Stage 3's capture with one steady receive gathered after the next block's memset, or not at all: the rebuild
    from stage 1 is not it, and the check names the call."""
    own, _ = megatron_2022_calls(3)
    gathers = own.index[own["api"] == "ncclAllGather"]
    late = gathers[len(gathers) // 4]
    assert own.at[late + 1, "api"] == "cudaMemsetAsync"
    swapped = own.copy()
    swapped.iloc[[late, late + 1]] = own.iloc[[late + 1, late]].to_numpy()
    assert "ncclAllGather with api 'ncclAllGather' rebuilt, cudaMemsetAsync" in rebuilt_2022(1, 3, swapped)
    dropped = _frame(own.drop(index=late).to_dict("records"))
    assert "ncclAllGather with api 'ncclAllGather' rebuilt, cudaMemsetAsync" in rebuilt_2022(1, 3, dropped)


def test_a_gather_of_another_size_after_a_launch_is_device_work():
    """An all-gather right after a point-to-point launch whose input is not a received chunk's size (a model's own
    gather) is work of the block that follows, not part of the exchange."""
    calls, communicators = megatron_2022_calls(1)
    gathers = calls.index[calls["api"] == "ncclAllGather"]
    calls.loc[gathers[1], "in_msg_nelems"] = 7.0
    cut = split(calls, communicators, PIPE, 1)
    labels = {row: label for (a, b), label in zip(cut.pieces, cut.labels) for row in range(a, b)}
    assert labels[gathers[1]] == "F1" and ":" in labels[gathers[2]]


def test_a_gather_on_the_pipeline_s_communicator_is_device_work():
    """A received chunk is gathered among the tensor-parallel ranks: an all-gather of its size on a communicator that
    carries point-to-point (the pipeline's own) is the block's work, not the exchange's."""
    calls, communicators = megatron_2022_calls(1)
    gathers = calls.index[calls["api"] == "ncclAllGather"]
    pipe_comm = calls.loc[calls["collective_name"].isin(["send", "recv"]), "comm_id"].iloc[0]
    calls.loc[gathers[1], "comm_id"] = pipe_comm
    cut = split(calls, communicators, PIPE, 1)
    labels = {row: label for (a, b), label in zip(cut.pieces, cut.labels) for row in range(a, b)}
    assert labels[gathers[1]] == "F1" and ":" in labels[gathers[2]]


def test_a_receive_is_gathered_once():
    """A second all-gather of a received chunk's size after one receive is the block's work: each receive is
    gathered once."""
    calls, communicators = megatron_2022_calls(1)
    gathers = calls.index[calls["api"] == "ncclAllGather"]
    first = gathers[1]
    twice = pd.concat([calls.iloc[: first + 1], calls.iloc[[first]], calls.iloc[first + 1 :]], ignore_index=True)
    twice["seq"] = np.arange(len(twice))
    cut = split(twice, communicators, PIPE, 1)
    labels = {row: label for (a, b), label in zip(cut.pieces, cut.labels) for row in range(a, b)}
    assert ":" in labels[first] and labels[first + 1] == "F1"


def _as_read(rank: int, calls: pd.DataFrame, communicators: pd.DataFrame) -> SimpleNamespace:
    kernels = pd.DataFrame({"kernel_id": list(NAMES), "name": list(NAMES.values())})
    return SimpleNamespace(
        rank=rank, calls=calls, communicators=communicators, kernels=kernels, memory=None, device={}, represents=[rank]
    )


@pytest.mark.parametrize("rule", [None, "another"])
def test_a_run_checked_by_another_rule_is_checked_again_when_read(rule):
    """A run whose rebuild was checked by another version of the rule (or says none): read, its checked stage is
    rebuilt again by this rule and compared with its capture; equal, the run reads; different, it is refused naming
    the stage (a trace never predicts on interior stages this Maya would not have rebuilt)."""
    source, own = megatron_2022_calls(1), megatron_2022_calls(3)
    rebuild = {"stages": STAGES, "stride": STRIDE, "from": [1, 2], "checked": [3], "rebuilt": [3], "rule": rule}
    traces = SimpleNamespace(attrs={"stage_rebuild": rebuild}, ranks={2: _as_read(2, *source), 6: _as_read(6, *own)})
    assert sorted(rebuilt_stages(traces)) == [6]
    gathers = own[0].index[own[0]["api"] == "ncclAllGather"]
    late = gathers[len(gathers) // 4]
    swapped = own[0].copy()
    swapped.iloc[[late, late + 1]] = own[0].iloc[[late + 1, late]].to_numpy()
    traces.ranks[6] = _as_read(6, swapped, own[1])
    with pytest.raises(ScheduleError, match="stage 3 rebuilt from rank 2's capture by this Maya's stage-rebuild rule"):
        rebuilt_stages(traces)
    rebuild["rule"] = rule_digest()
    assert sorted(rebuilt_stages(traces)) == [6]  # checked by this rule at capture: trusted
