"""Exchange groups (context parallelism's ring, expert parallelism's all-to-alls) told from pipeline stages when
ranks are deduplicated (`emulator/dedup.layout_of`), and the classes they give replayed to the step of every rank
captured (`simulator/topology.py`), on synthetic Megatron-like jobs."""

import json
import re
import shutil
from types import SimpleNamespace

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware
from maya.core.pipeline_stages import Pipeline
from maya.emulator import dedup, launcher
from maya.emulator.dedup import LayoutError, layout_of, stage_classes
from maya.simulator import MeasuredDurations, MissingRanks, notes, simulate, summarize
from maya.simulator.trace import load
from maya.simulator.trace_builder import RankBuilder, TraceBuilder, one_f_one_b
from maya_trace_spec import read_table

runner = CliRunner()


def megatron_job(tp: int, cp: int, ep: int, dp: int, pp: int, represents: dict[int, list[int]] | None = None):
    """A job in Megatron-Core's rank order (tp-cp-ep-dp-pp: rank = t + tp (c + cp (d + dp s))), 2 iterations of
    4 micro-batches in the 1F1B schedule, each layer's attention a context-parallel ring (a send to the next and a
    receive from the previous member in a module's forward, and again in the backward; step `i` of member `c` takes
    twice as long when the keys it holds come from a lower member, as a load-balanced causal ring's halves make the
    members differ; a backward's calls have no module path, as autograd's do not) and its MLP two expert-parallel
    all-to-alls (a send and a receive to every member, itself included; `ep` divides `dp`, with `tp = cp = 1`),
    gradients reduced over data x context parallelism. The CP group is listed before the pipeline group: rank 0's
    ring and stage peers are in different 2-rank groups.
    `represents`: capture only its keys, each standing for its list (None: every rank captured)."""
    world = tp * cp * dp * pp
    b = TraceBuilder(world, nproc_per_node=min(8, world))

    def rank(t: int, c: int, d: int, s: int) -> int:
        return t + tp * (c + cp * (d + dp * s))

    for r in sorted(represents) if represents is not None else range(world):
        t, c, d, s = r % tp, r // tp % cp, r // (tp * cp) % dp, r // (tp * cp * dp)
        comms = {
            "tp": [rank(x, c, d, s) for x in range(tp)],
            "cp": [rank(t, x, d, s) for x in range(cp)],
            "pp": [rank(t, c, d, x) for x in range(pp)],
            "dp": [rank(t, y, x, s) for x in range(dp) for y in range(cp)],
            "ep": [rank(t, c, d // ep * ep + x, s) for x in range(ep)],
        }
        names = {kind: f"{kind}{sorted(members)}" for kind, members in comms.items()}
        for kind, members in comms.items():
            b.communicator(names[kind], members)
        rank_program(b.rank(r, represents=represents[r] if represents is not None else None), names, c, cp, ep, s, pp)
    return b


def rank_program(k: RankBuilder, names: dict[str, str], c: int, cp: int, ep: int, s: int, pp: int) -> None:
    """`megatron_job`'s calls on one rank: ring position `c` of `cp`, stage `s` of `pp`, groups `names`."""

    def ring(backward: bool) -> None:
        for step in range(cp - 1):
            k.group_start()
            k.send(names["cp"], (c + 1) % cp, 20_000)
            k.recv(names["cp"], (c - 1) % cp, 20_000)
            k.group_end()
            k.kernel((2 if (c - step - 1) % cp < c else 1) * (60_000 if backward else 30_000))

    def all_to_all() -> None:
        k.group_start()
        for x in range(ep):
            k.send(names["ep"], x, 5_000)
            k.recv(names["ep"], x, 5_000)
        k.group_end()

    def layer(backward: bool) -> None:
        # a backward's ops have no module path (autograd runs them), only the backward phase
        k.module, k.backward = None if backward else "decoder.layers.0.self_attention", backward
        k.gemm(1024, 512, 1024, 40_000)
        ring(backward)
        k.allreduce(names["tp"], 15_000)
        k.module = None if backward else "decoder.layers.0.mlp"
        if ep > 1:
            all_to_all()
        k.gemm(4096, 512, 1024, 80_000)
        if ep > 1:
            all_to_all()
        k.module, k.backward = None, False

    for it in range(2):
        k.iteration = it
        one_f_one_b(k, s, pp, 4, lambda: layer(False), lambda: layer(True), comm=names["pp"])
        k.allreduce(names["dp"], 100_000)
        k.stream_sync()


def classes_of(tmp_path, job: TraceBuilder) -> dict[int, list[int]]:
    """The deduplicated classes read from rank 0's tables of `job` (every rank captured)."""
    run = job.write(tmp_path / "all")
    tables = [read_table(run, name, [0]) for name in ("api_calls", "communicators", "ops")]
    return stage_classes(job.world_size, layout_of(*tables))


def step_ns(tmp_path, job: TraceBuilder, name: str) -> tuple[int, int]:
    """(iteration ns, programs replayed) of `job`."""
    sim = simulate(load(job.write(tmp_path / name)), hardware.get("h100-sxm"), MeasuredDurations())
    assert len(sim.replicas) == job.world_size
    return summarize(sim).iteration_ns, len(sim.programs)


@pytest.mark.slow
def test_a_context_parallel_ring_beside_a_pipeline_is_not_taken_for_it(tmp_path):
    """TP 2 x CP 2 x DP 2 x PP 2: rank 0 sends to its ring peer (rank 2) within attention and to its next stage
    (rank 8) between passes, over two 2-rank groups; the CP group, listed first, was read as the pipeline, and rank 0
    stood for stage 1's ranks 8, 9, 12 and 13. The classes are stage x ring position, and they replay to the step
    of all 16 ranks captured."""
    full = megatron_job(2, 2, 1, 2, 2)
    classes = classes_of(tmp_path, full)
    assert classes == {0: [0, 1, 4, 5], 2: [2, 3, 6, 7], 8: [8, 9, 12, 13], 10: [10, 11, 14, 15]}
    every, programs = step_ns(tmp_path, megatron_job(2, 2, 1, 2, 2), "every")
    deduplicated, captured = step_ns(tmp_path, megatron_job(2, 2, 1, 2, 2, classes), "dedup")
    assert (programs, captured) == (16, 4)
    assert deduplicated == pytest.approx(every, rel=1e-9)


@pytest.mark.slow
def test_a_ring_without_a_pipeline_gives_a_class_per_ring_position(tmp_path):
    """TP 2 x CP 4 x DP 2 (no pipeline): 4 classes, one per ring position, whose members differ (each position
    holds other halves of the causal ring's chunks); each member of a class exchanges with its own ring."""
    classes = classes_of(tmp_path, megatron_job(2, 4, 1, 2, 1))
    assert classes == {c * 2: [x + c * 2 + d * 8 for d in range(2) for x in range(2)] for c in range(4)}
    every, _ = step_ns(tmp_path, megatron_job(2, 4, 1, 2, 1), "every")
    deduplicated, captured = step_ns(tmp_path, megatron_job(2, 4, 1, 2, 1, classes), "dedup")
    assert captured == 4 and deduplicated == pytest.approx(every, rel=1e-9)


@pytest.mark.slow
def test_expert_all_to_alls_beside_a_pipeline(tmp_path):
    """EP 4 x DP 8 x PP 2 (expert data parallelism 2): the all-to-alls' group within the MLP is not the pipeline
    (rank 0 reaches ranks 1-3 within passes and rank 8 between them); a class per stage and EP position."""
    classes = classes_of(tmp_path, megatron_job(1, 1, 4, 8, 2))
    assert classes == {s * 8 + e: [s * 8 + e, s * 8 + e + 4] for s in range(2) for e in range(4)}
    every, _ = step_ns(tmp_path, megatron_job(1, 1, 4, 8, 2), "every")
    deduplicated, captured = step_ns(tmp_path, megatron_job(1, 1, 4, 8, 2, classes), "dedup")
    assert captured == 8 and deduplicated == pytest.approx(every, rel=1e-9)


@pytest.mark.slow
def test_without_ops_every_exchange_is_read_as_the_pipeline(tmp_path):
    """A trace without ops (no framework context) cannot tell a pass's exchanges from the pipeline's: all its
    point-to-point traffic is taken to be between passes, as before exchange groups were told apart."""
    run = megatron_job(2, 4, 1, 2, 1).write(tmp_path / "run")
    layout = layout_of(read_table(run, "api_calls", [0]), read_table(run, "communicators", [0]))
    assert layout.pipeline is not None and layout.exchanges == ()


@pytest.mark.slow
def test_stages_that_also_exchange_within_passes_are_not_rebuilt(tmp_path):
    """PP 6 x CP 2: a stage is two classes, and stage 1's exchanges are not the schedule's alone; every class is
    captured (none rebuilt) and the run's attrs say why."""
    run = megatron_job(1, 2, 1, 1, 6).write(tmp_path / "run")
    done = SimpleNamespace(status="complete")
    captured, represents, attrs, found = launcher._deduplicated(
        lambda rank, keep=True: (None, done), SimpleNamespace(run_dir=run), 12, 1, None, ["pretrain_gpt.py"], None
    )
    assert sorted(captured) == list(range(12)) and represents == {r: [r] for r in range(12)}
    assert attrs == {
        "stages": 6,
        "stride": 2,
        "refused": "ranks also exchange within the model's passes (a group of 2 ranks 1 apart): a stage is more than "
        "one class of ranks, and stage 1's exchanges are not the schedule's alone",
    }
    assert found == {"classes": 12}


@pytest.mark.e2e
@pytest.mark.slow
def test_a_ring_within_a_pipeline_emulated_deduplicated_predicts_like_every_rank(tmp_path):
    """`ring_pipeline.py` on 8 GPUs (PP 2 x CP 2 x DP 2): before exchange groups were told apart, the ring (rank
    0's first point-to-point group) was read as the pipeline, ranks 0 and 1 were captured for all 8 and the replay
    deadlocked (stage 1's ranks replayed stage 0's program); now one rank per stage and ring position is captured
    and the step is that of every rank captured."""
    argv = ["python", str(WORKLOADS / "ring_pipeline.py"), "--steps", "2"]
    steps = {}
    for name, options in (("dedup", []), ("every", ["--no-dedup"])):
        r = runner.invoke(
            app, ["emulate", "--out", str(tmp_path / name), "--nproc-per-node", "8", *options, "--", *argv]
        )
        assert r.exit_code == 0, r.output
        p = runner.invoke(app, ["predict", str(tmp_path / name), "--durations", "roofline", "--json"])
        assert p.exit_code == 0, p.output
        steps[name] = json.loads(p.stdout)
    represents = read_table(tmp_path / "dedup", "devices").to_pydict()
    assert dict(zip(represents["rank"], represents["represents"])) == {0: [0, 2], 1: [1, 3], 4: [4, 6], 5: [5, 7]}
    assert steps["every"]["captured_ranks"] == 8 and steps["dedup"]["captured_ranks"] == 4
    assert steps["dedup"]["iteration_ms"] == pytest.approx(steps["every"]["iteration_ms"], rel=5e-3)


def deduplicate(run, world: int, monkeypatch, differs: frozenset[int] = frozenset()):
    """`launcher._deduplicated` on the job written at `run`, each capture standing in for the rank's own (the ranks
    in `differs` with other calls than the rest: `convert.signature` is read from the rank); returns
    (ranks captured, represents, stage_rebuild attrs, dedup attrs, ranks captured to check a class), checking
    that the number of classes, or the refusal and its reason, was said before the other ranks were captured."""
    done, probes, said = SimpleNamespace(status="complete"), [], []
    monkeypatch.setattr(launcher, "signature", lambda rank: "other" if rank in differs else "")
    monkeypatch.setattr(launcher, "write_rank", lambda raw, writer, rank: None)

    def capture(rank: int, keep: bool = True):
        if not keep:
            probes.append(rank)
        return rank, done

    captured, represents, attrs, found = launcher._deduplicated(
        capture, SimpleNamespace(run_dir=run), world, 1, None, ["pretrain_gpt.py"], said.append
    )
    (line,) = said  # before the other ranks are captured
    if "refused" in found:
        reason = found["refused"].removeprefix("every rank captured: ")
        assert line == f"maya: deduplication refused, capturing all {world} ranks: {reason}\n"
    else:
        assert line == f"maya: {found['classes']} class(es) of equivalent ranks among {world}: capturing one of each\n"
    return sorted(captured), represents, attrs, found, sorted(probes)


@pytest.mark.slow
def test_a_class_holding_a_tensor_parallel_group_is_not_checked(tmp_path, monkeypatch):
    """TP 2 x CP 2 x DP 2 x PP 2: each class of 4 holds whole TP groups, whose lone rank cannot be replayed: no member
    is captured to check it (a differing rank 0, which logs, stands for its class as before)."""
    run = megatron_job(2, 2, 1, 2, 2).write(tmp_path / "run")
    captured, represents, attrs, found, probes = deduplicate(run, 16, monkeypatch, frozenset({0}))
    assert captured == [0, 2, 8, 10] and probes == [] and represents[0] == [0, 1, 4, 5]
    assert attrs is None and found == {"classes": 4}


@pytest.mark.parametrize(
    ("tp", "cp", "dp", "pp", "reps"),
    [
        (4, 1, 1, 2, [0, 4]),
        pytest.param(4, 2, 1, 1, [0, 4], marks=pytest.mark.slow),
        pytest.param(1, 1, 4, 4, [0, 4, 8, 12], marks=pytest.mark.slow),
    ],
)
def test_a_class_that_is_one_of_rank_0s_groups_is_not_checked(tmp_path, monkeypatch, tp, cp, dp, pp, reps):
    """TP 4 x PP 2 x DP 1 and TP 4 x CP 2 x DP 1 (every Korthikanti row is TP x PP with DP 1): each class is a TP
    group, so a check would capture another large rank; they capture ranks 0 and 4 as before the check was judged by
    membership. PP 4 x DP 4 (TP 1): each stage's class is its data-parallel group, not checked either."""
    world = tp * cp * dp * pp
    run = megatron_job(tp, cp, 1, dp, pp).write(tmp_path / "run")
    captured, represents, _, found, probes = deduplicate(run, world, monkeypatch, frozenset({world - 1}))
    assert captured == reps and probes == [] and found == {"classes": len(reps)}
    assert sorted(r for members in represents.values() for r in members) == list(range(world))


def test_the_one_class_of_a_data_parallel_job_is_checked(tmp_path, monkeypatch):
    """DP 4 alone: the one class is the data-parallel group, and it is checked (its last member captured); a differing
    rank 0 splits it (rank 3 stands for ranks 1 and 2)."""
    run = megatron_job(1, 1, 1, 4, 1).write(tmp_path / "run")
    captured, represents, _, found, probes = deduplicate(run, 4, monkeypatch, frozenset({0}))
    assert probes == [3] and captured == [0, 3] and represents == {0: [0], 3: [3, 1, 2]} and found == {"classes": 1}


def crossed_job(represents: dict[int, list[int]] | None = None) -> TraceBuilder:
    """CP 2 x DP 4 with 2 distributed-optimizer instances: `megatron_job`'s calls, and an all-reduce over a group of
    half the data-parallel ranks x CP (Megatron's intra-partial data-parallel group with CP), which holds 2 of each
    class's 4 members."""
    b = TraceBuilder(8, nproc_per_node=8)
    for r in sorted(represents) if represents is not None else range(8):
        c, d = r % 2, r // 2
        comms = {
            "tp": [r],
            "cp": [x + 2 * d for x in range(2)],
            "pp": [r],
            "dp": list(range(8)),
            "ep": [r],
            "half": list(range(d // 2 * 4, d // 2 * 4 + 4)),
        }
        names = {kind: f"{kind}{sorted(members)}" for kind, members in comms.items()}
        for kind, members in comms.items():
            b.communicator(names[kind], members)
        k = b.rank(r, represents=represents[r] if represents is not None else None)
        rank_program(k, names, c, 2, 1, 0, 1)
        k.allreduce(names["half"], 50_000)
        k.stream_sync()
    return b


@pytest.mark.slow
def test_a_group_holding_part_of_a_class_keeps_the_classes_whole(tmp_path, monkeypatch):
    """CP 2 x DP 4 with a group over ranks 0-3 (2 of class [0, 2, 4, 6]): split alike, rank 6 standing for 2 and 4
    cannot be replayed (that group's members are mapped by position); a differing rank 0 splits nothing, is unverified
    with the reason, and the classes replay to the step of every rank."""
    run = crossed_job().write(tmp_path / "run")
    captured, represents, _, found, probes = deduplicate(run, 8, monkeypatch, frozenset({0}))
    assert probes == [6, 7] and captured == [0, 1] and represents == {0: [0, 2, 4, 6], 1: [1, 3, 5, 7]}
    assert found["unverified"] == {0: 6} and found["unverified_reason"].startswith(
        "group [0, 1, 2, 3] holds 2 of the 4 ranks of class [0, 2, 4, 6]: split alike"
    )
    (note,) = notes.dedup_notes(SimpleNamespace(attrs={"dedup": json.loads(json.dumps(found))}))
    assert found["unverified_reason"] in note
    every, _ = step_ns(tmp_path, crossed_job(), "every")
    assert step_ns(tmp_path, crossed_job(represents), "kept")[0] == pytest.approx(every, rel=1e-9)
    with pytest.raises(ValueError, match="do not fill blocks"):
        step_ns(tmp_path, crossed_job({0: [0], 6: [6, 2, 4], 1: [1], 7: [7, 3, 5]}), "alike")


@pytest.mark.slow
def test_a_ring_across_classes_does_not_keep_them_from_being_checked(tmp_path, monkeypatch):
    """CP 2 x DP 4 x PP 2 (TP 1): the CP group (2 ranks) is smaller than a class (4 data-parallel ranks) but lies
    across classes, so each class's last member is captured and compared (it was not when any smaller group blocked
    the check: lumped ring positions, TP 1 x CP 4 x DP 2 as one class, predicted -28% unnoticed)."""
    run = megatron_job(1, 2, 1, 4, 2).write(tmp_path / "run")
    captured, represents, attrs, found, probes = deduplicate(run, 16, monkeypatch)
    assert captured == [0, 1, 8, 9] and probes == [6, 7, 14, 15]
    assert represents == {r: [r, r + 2, r + 4, r + 6] for r in (0, 1, 8, 9)} and found == {"classes": 4}


@pytest.mark.parametrize(("tp", "cp", "dp", "pp"), [(1, 4, 4, 1), (1, 2, 4, 2)])
@pytest.mark.slow
def test_a_differing_member_splits_every_class_alike_and_the_replay_is_every_ranks(
    tmp_path, monkeypatch, tp, cp, dp, pp
):
    """CP 4 x DP 4 and CP 2 x DP 4 x PP 2: rank 0 differs from the last member of its class. Splitting
    its class alone (rank 0 for itself, the last member for the rest) misaligned the lists the topology maps the
    other classes' peers by, and the replay deadlocked; every class is now split alike (its last member was captured
    to check it), and the step is that of every rank captured."""
    world = tp * cp * dp * pp
    run = megatron_job(tp, cp, 1, dp, pp).write(tmp_path / "run")
    captured, represents, _, found, probes = deduplicate(run, world, monkeypatch, frozenset({0}))
    classes = classes_of(tmp_path, megatron_job(tp, cp, 1, dp, pp))
    expected = {}
    for rep, members in classes.items():
        expected.update({rep: [rep], members[-1]: [members[-1], *members[1:-1]]})
    assert represents == expected and captured == sorted(expected) and len(probes) == len(classes)
    assert found == {"classes": len(classes)}
    every, _ = step_ns(tmp_path, megatron_job(tp, cp, 1, dp, pp), "every")
    deduplicated, programs = step_ns(tmp_path, megatron_job(tp, cp, 1, dp, pp, represents), "dedup")
    assert programs == 2 * len(classes) and deduplicated == pytest.approx(every, rel=1e-9)


@pytest.mark.slow
def test_a_differing_member_where_not_every_class_is_checked_at_once_is_unverified(tmp_path, monkeypatch):
    """PP 6 x DP 2, the classes checked (`dedup.checked` patched: here each stage's class is its data-parallel group,
    which is not checked): stages 0, 1, 2, 4 and 5 are captured and checked first, before the interior stages are
    rebuilt or captured, so the classes cannot all be split alike: the last stage's differing member (Megatron logs
    on the last rank) splits nothing, is listed in the run's attrs with the reason and `maya predict` says so."""
    run = megatron_job(1, 1, 1, 2, 6).write(tmp_path / "run")
    monkeypatch.setattr(dedup, "checked", lambda classes, communicators: True)
    captured, represents, _, found, probes = deduplicate(run, 12, monkeypatch, frozenset({11}))
    assert 11 in probes and 11 not in captured and represents[10] == [10, 11]
    assert all(members == [rep, rep + 1] for rep, members in represents.items())
    assert found == {"classes": 6, "unverified": {10: 11}, "unverified_reason": launcher.IN_TURNS}
    (note,) = notes.dedup_notes(SimpleNamespace(attrs={"dedup": json.loads(json.dumps(found))}))
    assert "rank 11's differ from rank 10's" in note and f"not split ({launcher.IN_TURNS})" in note


@pytest.mark.slow
def test_exchanges_without_ops_refuse_deduplication_rather_than_drop_an_axis(tmp_path, monkeypatch):
    """TP 2 x CP 2 x DP 2 x PP 2 read without ops: rank 0's ring peer (2, on the CP group) and next stage (8, on the
    pipeline group) are in no one group; `max()` once kept the CP group as the pipeline (2 classes of 8, and the
    replay deadlocked). Now the layout is refused and every rank captured, the attrs saying why."""
    run = megatron_job(2, 2, 1, 2, 2).write(tmp_path / "run")
    shutil.rmtree(run / "ops")
    with pytest.raises(LayoutError, match=r"holds every peer .*\[2, 8\]"):
        layout_of(read_table(run, "api_calls", [0]), read_table(run, "communicators", [0]))
    captured, represents, attrs, found, _ = deduplicate(run, 16, monkeypatch)
    assert captured == list(range(16)) and represents == {r: [r] for r in range(16)} and attrs is None
    assert found["classes"] == 16 and found["refused"].startswith("every rank captured: no group used between")
    (note,) = notes.dedup_notes(SimpleNamespace(attrs={"dedup": found}))
    assert note.startswith("deduplication refused: every rank captured")


def test_a_group_used_within_a_pass_is_an_exchange_group_for_all_its_calls(tmp_path):
    """A ring group also used between passes (a KV prefetch before the attention module's range opens) is not read as
    the pipeline: one call within a pass makes the whole group an exchange."""
    b = TraceBuilder(4)
    b.communicator("cp", [0, 1, 2, 3])
    for r in range(4):
        k = b.rank(r)
        k.send("cp", (r + 1) % 4, 20_000)  # the prefetch, between passes
        k.module = "attention"
        k.send("cp", (r + 1) % 4, 20_000)
        k.module = None
        k.stream_sync()
    run = b.write(tmp_path / "run")
    layout = layout_of(*(read_table(run, name, [0]) for name in ("api_calls", "communicators", "ops")))
    assert layout.pipeline is None and [(a.stages, a.stride) for a in layout.exchanges] == [(4, 1)]


def test_a_backward_only_ring_without_a_module_path_is_an_exchange_group(tmp_path):
    """Autograd's backward ops have no module path: a group whose sends are all in a backward (its own communicator
    for the gradients' ring) is an exchange group by the backward phase alone, not the pipeline."""
    b = TraceBuilder(4)
    b.communicator("dkv", [0, 1, 2, 3])
    for r in range(4):
        k = b.rank(r)
        k.module, k.backward = None, True
        k.send("dkv", (r + 1) % 4, 20_000)
        k.backward = False
        k.stream_sync()
    run = b.write(tmp_path / "run")
    layout = layout_of(*(read_table(run, name, [0]) for name in ("api_calls", "communicators", "ops")))
    assert layout.pipeline is None and [(a.stages, a.stride) for a in layout.exchanges] == [(4, 1)]


def test_a_non_strided_exchange_group_captures_every_rank_instead_of_aborting(tmp_path, monkeypatch):
    """A ring over ranks 0, 2 and 3 (hierarchical CP, decoupled expert layouts) is not evenly strided: deduplication
    captures every rank and says why, where it used to abort the emulation after rank 0's capture."""
    b = TraceBuilder(4)
    b.communicator("ring", [0, 2, 3])
    for r in range(4):
        k = b.rank(r)
        if r != 1:
            k.module = "attention"
            k.send("ring", ([0, 2, 3].index(r) + 1) % 3, 20_000)
            k.module = None
        k.stream_sync()
    run = b.write(tmp_path / "run")
    captured, represents, attrs, found, _ = deduplicate(run, 4, monkeypatch)
    assert captured == [0, 1, 2, 3] and represents == {r: [r] for r in range(4)} and attrs is None
    assert found == {"classes": 4, "refused": "every rank captured: exchange group [0, 2, 3] is not evenly strided"}


@pytest.mark.slow
def test_ops_numbered_otherwise_give_the_same_layout(tmp_path):
    """`layout_of` looks calls' ops up by position when they are numbered 0, 1, ... as written, else by a sorted
    search: ops renumbered (shifted by 1,000, in reverse order) give TP 2 x CP 2 x DP 2 x PP 2 the same layout."""
    run = megatron_job(2, 2, 1, 2, 2).write(tmp_path / "run")
    calls, communicators, ops = (read_table(run, name, [0]) for name in ("api_calls", "communicators", "ops"))
    assert ops.column("op_id").to_pylist() == list(range(len(ops)))
    layout = layout_of(calls, communicators, ops)
    assert layout.pipeline == Pipeline(2, 8) and layout.exchanges == (Pipeline(2, 2),)

    def shifted(table):
        return table.set_column(table.schema.get_field_index("op_id"), "op_id", pc.add(table["op_id"], 1000))

    assert layout_of(shifted(calls), communicators, shifted(ops).take(list(reversed(range(len(ops)))))) == layout


def test_only_a_layout_error_refuses_deduplication(tmp_path, monkeypatch):
    """Any other ValueError raised while the layout is read is a bug, not a refusal: it propagates."""
    run = megatron_job(1, 1, 1, 2, 1).write(tmp_path / "run")
    monkeypatch.setattr(dedup, "layout_of", lambda *tables: int("not a layout"))
    with pytest.raises(ValueError, match="invalid literal"):
        deduplicate(run, 2, monkeypatch)


def test_a_subset_whose_layout_cannot_be_read_is_refused_with_its_reason(tmp_path, monkeypatch):
    """`--ranks 0` of the non-strided ring's job: the captured rank stands for no other, the run's attrs keep why
    (`dedup.refused`), and `maya predict`'s refusal (the ring's uncaptured members) repeats it."""

    def rank_0(run_dir, attrs=None):
        b = TraceBuilder(4)
        b.communicator("ring", [0, 2, 3])
        k = b.rank(0)
        k.module = "attention"
        k.send("ring", 1, 20_000)
        k.module = None
        k.stream_sync()
        return b.write(run_dir, attrs=attrs)

    run = rank_0(tmp_path / "run")
    done = SimpleNamespace(status="complete")
    represents, assumed, found = launcher._subset(SimpleNamespace(run_dir=run), 4, {0: (run, done)})
    reason = "the captured ranks stand for no others: exchange group [0, 2, 3] is not evenly strided"
    assert represents == {0: [0]} and assumed == {} and found == {"refused": reason}
    refused = rank_0(tmp_path / "refused", {"dedup": found})
    with pytest.raises(MissingRanks, match=rf"ring: rank\(s\) 2, 3 .*\(deduplication refused: {re.escape(reason)}\)"):
        simulate(load(refused), hardware.get("h100-sxm"), MeasuredDurations())
