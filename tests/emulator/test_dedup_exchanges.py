"""Exchange groups (context parallelism's ring, expert parallelism's all-to-alls) told from pipeline stages when
ranks are deduplicated (`emulator/dedup.layout_of`), and the classes they give replayed to the step of every rank
captured (`simulator/topology.py`), on synthetic Megatron-like jobs."""

import json
from types import SimpleNamespace

import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core import hardware
from maya.emulator import launcher
from maya.emulator.dedup import layout_of, stage_classes
from maya.simulator import MeasuredDurations, simulate, summarize
from maya.simulator.trace import load
from maya.simulator.trace_builder import RankBuilder, TraceBuilder, one_f_one_b
from maya_trace_spec import read_table

runner = CliRunner()


def megatron_job(tp: int, cp: int, ep: int, dp: int, pp: int, represents: dict[int, list[int]] | None = None):
    """A job in Megatron-Core's rank order (tp-cp-ep-dp-pp: rank = t + tp (c + cp (d + dp s))), 2 iterations of
    4 micro-batches in the 1F1B schedule, each layer's attention a context-parallel ring (a send to the next and a
    receive from the previous member in a module's forward, and again in the backward; step `i` of member `c` takes
    twice as long when the keys it holds come from a lower member, as a load-balanced causal ring's halves make the
    members differ) and its MLP two expert-parallel all-to-alls (a send and a receive to every member, itself
    included; `ep` divides `dp`, with `tp = cp = 1`), gradients reduced over data x context parallelism. The CP
    group is listed before the pipeline group: rank 0's ring and stage peers are in different 2-rank groups.
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
        k.module, k.backward = "decoder.layers.0.self_attention", backward
        k.gemm(1024, 512, 1024, 40_000)
        ring(backward)
        k.allreduce(names["tp"], 15_000)
        k.module = "decoder.layers.0.mlp"
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


def test_a_ring_without_a_pipeline_gives_a_class_per_ring_position(tmp_path):
    """TP 2 x CP 4 x DP 2 (no pipeline): 4 classes, one per ring position, whose members differ (each position
    holds other halves of the causal ring's chunks); each member of a class exchanges with its own ring."""
    classes = classes_of(tmp_path, megatron_job(2, 4, 1, 2, 1))
    assert classes == {c * 2: [x + c * 2 + d * 8 for d in range(2) for x in range(2)] for c in range(4)}
    every, _ = step_ns(tmp_path, megatron_job(2, 4, 1, 2, 1), "every")
    deduplicated, captured = step_ns(tmp_path, megatron_job(2, 4, 1, 2, 1, classes), "dedup")
    assert captured == 4 and deduplicated == pytest.approx(every, rel=1e-9)


def test_expert_all_to_alls_beside_a_pipeline(tmp_path):
    """EP 4 x DP 8 x PP 2 (expert data parallelism 2): the all-to-alls' group within the MLP is not the pipeline
    (rank 0 reaches ranks 1-3 within passes and rank 8 between them); a class per stage and EP position."""
    classes = classes_of(tmp_path, megatron_job(1, 1, 4, 8, 2))
    assert classes == {s * 8 + e: [s * 8 + e, s * 8 + e + 4] for s in range(2) for e in range(4)}
    every, _ = step_ns(tmp_path, megatron_job(1, 1, 4, 8, 2), "every")
    deduplicated, captured = step_ns(tmp_path, megatron_job(1, 1, 4, 8, 2, classes), "dedup")
    assert captured == 8 and deduplicated == pytest.approx(every, rel=1e-9)


def test_without_ops_every_exchange_is_read_as_the_pipeline(tmp_path):
    """A trace without ops (no framework context) cannot tell a pass's exchanges from the pipeline's: all its
    point-to-point traffic is taken to be between passes, as before exchange groups were told apart."""
    run = megatron_job(2, 4, 1, 2, 1).write(tmp_path / "run")
    layout = layout_of(read_table(run, "api_calls", [0]), read_table(run, "communicators", [0]))
    assert layout.pipeline is not None and layout.exchanges == ()


def test_stages_that_also_exchange_within_passes_are_not_rebuilt(tmp_path):
    """PP 6 x CP 2: a stage is two classes, and stage 1's exchanges are not the schedule's alone; every class is
    captured (none rebuilt) and the run's attrs say why."""
    run = megatron_job(1, 2, 1, 1, 6).write(tmp_path / "run")
    done = SimpleNamespace(status="complete")
    captured, represents, attrs = launcher._deduplicated(
        lambda rank, keep=True: (None, done), SimpleNamespace(run_dir=run), 12, 1, None, ["pretrain_gpt.py"]
    )
    assert sorted(captured) == list(range(12)) and represents == {r: [r] for r in range(12)}
    assert attrs["refused"] == (
        "ranks also exchange within the model's passes (a group of 2 ranks 1 apart): a stage is more than one class "
        "of ranks, and stage 1's exchanges are not the schedule's alone"
    )


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
