"""Interior pipeline stages of Megatron-LM's 1F1B schedules rebuilt from one stage's capture.

Stage `s` of `P` with `M` micro-batches a step runs `w = min(P - s - 1, M)` warm-up forwards, then `M - w`
(forward, backward) pairs, then `w` cool-down backwards, exchanging activations and gradients with stages `s - 1`
and `s + 1` between them (`forward_backward_pipelining_without_interleaving`). Interior stages with the same layers
run the same forward and backward of each micro-batch, in another order and with other peers. `split` cuts an
interior stage's calls (`api_calls` rows in `seq` order) into exchanges (the maximal runs of calls without device
work that hold point-to-point launches: receive buffers, the launch, its waits and syncs) and the blocks of device
work between them; a block after an exchange that receives from `s - 1` is a forward, after one that receives from
`s + 1` a backward. It reads `M` from the exchanges, which must follow the schedule step after step. `rebuild`
orders one stage's blocks as another stage runs them: micro-batch `i`'s forward and backward keep their calls, each
exchange is taken from the captured stage's exchanges of the same kind (in turn: a stage nearer the end makes more
of the steady state's combined exchanges), what lies between steps (the optimizer) stays, and the peers and process
groups move by the stage difference (`Pipeline.translate`). `difference` compares a rebuild with a capture.

Megatron-LM's interleaved schedule (`forward_backward_pipelining_with_interleaving`, `V` model chunks a stage) is
rebuilt the same way when it overlaps its point-to-point communication (`overlap_p2p_comm`, its default): an interior
stage runs the step's `V M` virtual micro-batches' forwards and backwards in an order whose exchanges depend on the
stage through its warm-up, `2 (P - s - 1) + (V - 1) N` forwards (`N`: `microbatch_group_size_per_vp_stage`), with an
exchange after each forward and each backward (`interleaved_schedule`). An odd stage is rebuilt from stage 1, an even
one from stage 2 (`INTERLEAVED_SOURCES`). Other work can depend on the stage beyond its warm-up: the options of
`INTERLEAVED_ORDER_OPTIONS` place it at a virtual micro-batch shifted by the stage, and Megatron-LM's
`num_microbatches_with_partial_activation_checkpoints` (set in code, no option) checkpoints micro-batches counted from
the stage's warm-up; a rebuild of such a stage differs from its capture and is refused. Without the overlap
(`--no-overlap-p2p-communication`) a steady step's forward and backward run with no exchange between them, so they
cannot be told apart: every stage is captured (`INTERLEAVED_UNSUPPORTED`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from maya.core.digest import files_digest

P2P = ("send", "recv")
ROOTED = ("scatter", "gather", "c10d::scatter_", "c10d::gather_", "nccl:scatter", "nccl:gather")
"""Ops of collectives with a root that NCCL's process group runs as sends and receives: the root sends to (or
receives from) every member, which is no pipeline (DTensor's `distribute_tensor` scatters each parameter from rank 0,
as OLMo-core's model initialisation does). Deduplication leaves their calls out of the layout
(`emulator/dedup.py`), and the simulator matches each as one collective of its communicator (`simulator/program.py`),
so a rank replayed from the root's program meets the root there."""
POLLS = ("cudaEventQuery", "cudaStreamQuery", "cuEventQuery", "cuStreamQuery")
"""Calls whose count depends on how long the capture ran (`emulator/convert.POLLS`): not compared."""
COMPARED = (
    "api",
    "kernel_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "shared_mem_bytes",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gemm_batch",
    "bytes",
    "memcpy_kind",
    "collective_name",
    "in_msg_nelems",
    "out_msg_nelems",
    "comm_dtype",
)
"""What `difference` compares of each call (besides kernel names, point-to-point peers, groups and event links)."""
RECORDS = ("cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags")
WAITS = ("cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaEventSynchronize", "cuEventSynchronize")
"""Event records and the calls the simulator links to an event's latest earlier record (`simulator/program.py`)."""
STAGE_OPTIONS = {
    "--pipeline-model-parallel-layout": None,
    "--moe-layer-freq": "[",
    "--hybrid-override-pattern": "|",
}
"""Megatron-LM options that can give pipeline stages different layers (option -> the text in its value that does;
None: any value): a stage that differs only from stage 3 on would pass the checks of stages 2 and `P - 2`."""

INTERLEAVED_ORDER_OPTIONS = {
    "--overlap-param-gather": "gathers a model chunk's parameters before virtual micro-batch `k + stage`'s forward "
    "(`param_sync_func`, with 3 or more model chunks)",
    "--overlap-grad-reduce": "reduces a model chunk's gradients after virtual micro-batch `k - stage`'s backward "
    "(`grad_sync_func`, with data parallelism)",
}
"""Megatron-LM options whose work the interleaved schedule places by the stage beyond its warm-up (option -> where,
`forward_backward_pipelining_with_interleaving`): such a job's interior stages are not rebuilt."""
INTERLEAVED_UNSUPPORTED = {
    "--no-overlap-p2p-communication": "a steady step's forward and backward run with no exchange between them",
    "--overlap-p2p-comm-warmup-flush": "the warm-up waits for its sends and receives in another order",
    "--overlap-moe-expert-parallel-comm": "the steady state runs combined forward-backward steps (MoE combined 1F1B)",
}
"""Megatron-LM options under which the interleaved schedule follows no order `split` reads (option -> why): named
when stage 1's capture follows no schedule."""


TEMPLATE_INTEGER = re.compile(r"Li-?\d+E")
"""An integer template argument in an Itanium-mangled kernel name (`ILi4E`: the literal 4): torch picks an
elementwise kernel's vector width from its pointers' alignment, which differs from rank to rank."""


class ScheduleError(ValueError):
    """A stage's calls follow no schedule `split` reads, or cannot be rebuilt for another stage."""


@dataclass(frozen=True)
class Pipeline:
    """Pipeline stages of a job: rank `r` is in stage `(r // stride) % stages`."""

    stages: int
    stride: int

    def stage(self, rank: int) -> int:
        """The stage of `rank`."""
        return rank // self.stride % self.stages

    def translate(self, rank: int, shift: int) -> int:
        """The rank that plays `rank`'s part `shift` stages on (cyclically: a group spanning the pipeline maps onto
        itself, and an interior stage's neighbours never wrap)."""
        stage = self.stage(rank)
        return rank + ((stage + shift) % self.stages - stage) * self.stride


def schedule(stages: int, stage: int, microbatches: int, counted: bool = False) -> list[str]:
    """An interior stage's step as exchanges and blocks: exchange kinds (`R-` receive from `stage - 1`, `S+R+` send
    to and receive from `stage + 1` in one launch, `S+,R-` two launches with no device work between) alternating
    with `F<i>` / `B<i>` (micro-batch i's forward or backward, from 0). With `counted`, a warm-up forward's send is
    followed by a block `T<i>` (Megatron-LM adds the micro-batch's token count, `total_num_tokens += num_tokens`,
    after `send_forward` in the warm-up and before `send_forward_recv_backward` in the steady state, where the
    count's kernels end `F<i>`)."""
    warmup = min(stages - stage - 1, microbatches)
    steady = microbatches - warmup
    events: list[str] = []
    for i in range(warmup):
        events += ["R-", f"F{i}", "S+", *([f"T{i}"] if counted else [])]
    if steady:
        events.append("R-")
    for j in range(steady):
        events += [f"F{warmup + j}", "R+S+", f"B{j}", "S-" if j == steady - 1 else "R-S-"]
    for k in range(warmup):
        events += ["R+", f"B{steady + k}", "S-"]
    out: list[str] = []
    for event in events:
        if event[0] in "RS" and out and out[-1][0] in "RS":
            out[-1] += "," + event
        else:
            out.append(event)
    return out


def interleaved_schedule(stages: int, stage: int, virtual: int, extra: int) -> list[str]:
    """An interior stage's step under Megatron-LM's interleaved schedule with `overlap_p2p_comm` (its default, which
    sends and receives each tensor with a launch of its own), as `schedule` writes the non-interleaved one: `F<k>` /
    `B<k>` are the `k`th forward and backward of the step's `virtual` (micro-batch, model chunk) pairs, the warm-up
    runs `2 (stages - stage - 1) + extra` forwards (`extra`: `(chunks - 1) microbatch_group_size_per_vp_stage`), the
    steady state a forward and a backward per step with an exchange after each. An odd stage receives before it
    sends, an even one sends first (`p2p_communication._p2p_ops`): stages are rebuilt from a stage of their parity
    (`INTERLEAVED_SOURCES`). Each exchange is named `<phase><place>:<kind>`:
    the phase (`i` the first receive, `w` warm-up, `s` steady, `c` cool-down), its place among the phase's exchanges
    of the same kind (`^` first, `$` last, none between: the first and last wait on no earlier send or are followed
    by the next phase's waits) and its launches."""
    warmup = min(2 * (stages - stage - 1) + extra, virtual)
    steady = virtual - warmup
    if steady < 1:
        raise ScheduleError(f"stage {stage} runs all {virtual} virtual micro-batches in its warm-up")
    forward = "R-,S+" if stage % 2 else "S+,R-"
    backward = "R+,S-" if stage % 2 else "S-,R+"
    exchanges, blocks = [("i", "R-")], []
    for k in range(warmup):
        blocks.append(f"F{k}")
        exchanges.append(("w", forward + (",R+" if k == warmup - 1 else "")))
    for k in range(steady):
        blocks += [f"F{warmup + k}", f"B{k}"]
        exchanges += [("s", forward if k < steady - 1 else "S+"), ("s", backward)]
    for k in range(steady, virtual):
        blocks.append(f"B{k}")
        exchanges.append(("c", backward if k < virtual - 1 else "S-"))
    counts: dict[tuple[str, str], int] = {}
    for exchange in exchanges:
        counts[exchange] = counts.get(exchange, 0) + 1
    seen: dict[tuple[str, str], int] = {}
    out = []
    for k, (phase, kind) in enumerate(exchanges):
        n = seen[phase, kind] = seen.get((phase, kind), 0) + 1
        place = "^" if n == 1 else "$" if n == counts[phase, kind] else ""
        out.append(f"{phase}{place}:{kind}")
        if k < len(blocks):
            out.append(blocks[k])
    return out


def launches_of(label: str) -> str:
    """The launches of an exchange's label (`schedule`, `interleaved_schedule`)."""
    return label.rpartition(":")[2]


@dataclass
class Split:
    """An interior stage's calls cut by `split`: `pieces` are row ranges `[start, end)` covering every call, `labels`
    name them (`head`, `between`, `tail`, an exchange's label, `F<i>` / `B<i>` / `T<i>`), `step` numbers the steps (-1
    outside); `counted`: the schedule's warm-up sends are followed by a block (`schedule`); `extra`: the interleaved
    schedule's warm-up constant (`interleaved_schedule`, `microbatches` then the virtual ones), None for 1F1B."""

    stage: int
    microbatches: int
    counted: bool
    pieces: list[tuple[int, int]]
    labels: list[str]
    step: list[int]
    extra: int | None = None

    def pattern(self, stages: int, stage: int) -> list[str]:
        """Stage `stage`'s step under the cut stage's schedule (`schedule`, or `interleaved_schedule` when `extra` is
        set)."""
        if self.extra is None:
            return schedule(stages, stage, self.microbatches, self.counted)
        return interleaved_schedule(stages, stage, self.microbatches, self.extra)


def _work(calls: pd.DataFrame) -> np.ndarray:
    """Per call, whether it asks the device for work: a kernel, a GEMM, a copy or memset, a collective."""
    api = calls["api"].astype(str)
    collective = calls["collective_name"].notna() & ~calls["collective_name"].isin(P2P)
    copies = api.str.contains("Memcpy|Memset", regex=True)
    return (calls["kernel_id"].notna() | calls["gemm_m"].notna() | copies | collective).to_numpy()


def _received_gathers(calls: pd.DataFrame, work: np.ndarray, p2p: np.ndarray) -> np.ndarray:
    """Per call, whether it all-gathers a received chunk right after a point-to-point launch: an all-gather on a
    communicator that carries no point-to-point, whose input is as large as a receive not yet gathered (each receive
    gathered once), with no device work since the last launch but such gathers.
    Megatron-LM's 2022 exchange (`validation/megatron_exchange.py`) all-gathers each received 1/TP chunk once its
    receive is waited on: at once in a blocking exchange, where the interleaved schedule waits in an overlapped one
    (between the launches of one exchange, or before the next block). Such a gather is part of the exchange, as the
    wait it follows is: which exchange waits for which receive is the schedule's, the same on every stage, while
    the blocks keep their own work (a forward gathered at once on stage 1, in its warm-up, and before the next block
    on stage 5, in its steady state, begins with the same calls on both)."""
    gather = (calls["collective_name"] == "allgather").to_numpy()
    receive = (calls["collective_name"] == "recv").to_numpy()
    sizes = calls["in_msg_nelems"].to_numpy(dtype="float64", na_value=np.nan)
    received = calls["out_msg_nelems"].to_numpy(dtype="float64", na_value=np.nan)
    comms = calls["comm_id"].astype(object).to_numpy()
    p2p_comms = set(comms[p2p])
    out = np.zeros(len(calls), dtype=bool)
    launched, pending = False, []
    for i in np.flatnonzero(work | p2p):
        if p2p[i]:
            launched = True
            if receive[i]:
                pending.append(received[i])
        else:
            out[i] = launched = bool(launched and gather[i] and comms[i] not in p2p_comms and sizes[i] in pending)
            if out[i]:
                pending.remove(sizes[i])
    return out


def _members(communicators: pd.DataFrame) -> dict[str, list[int]]:
    """Communicator id -> global ranks by communicator rank (empty when not listed)."""
    out = {}
    for comm, ranks in zip(communicators["comm_id"], communicators["ranks"]):
        out[str(comm)] = [int(r) for r in ranks] if ranks is not None and len(ranks) else []
    return out


def _direction(calls: pd.DataFrame, i: int, members: dict[str, list[int]], pipeline: Pipeline, stage: int) -> str:
    """`R-`, `S+`, ...: call `i`'s operation and which neighbour it reaches."""
    ranks = members.get(str(calls["comm_id"].iat[i]), [])
    peer = calls["peer_rank"].iat[i]
    if pd.isna(peer) or not 0 <= int(peer) < len(ranks):
        raise ScheduleError(f"call {int(calls['seq'].iat[i])}: a point-to-point operation with no known peer")
    other = pipeline.stage(ranks[int(peer)])
    if other not in (stage - 1, stage + 1):
        raise ScheduleError(f"stage {stage} exchanges with stage {other}, not a neighbour")
    return ("S" if calls["collective_name"].iat[i] == "send" else "R") + ("+" if other > stage else "-")


def split(calls: pd.DataFrame, communicators: pd.DataFrame, pipeline: Pipeline, stage: int) -> Split:
    """Cut interior `stage`'s calls into exchanges and blocks (module docstring); ScheduleError when they do not
    follow the non-interleaved 1F1B schedule of any micro-batch count or the interleaved one (`_schedule_of`), step
    after step. A step begun but not
    ended (`maya emulate --iterations` stops a rank where its next iteration begins) is its `tail`."""
    if not 0 < stage < pipeline.stages - 1:
        raise ScheduleError(f"stage {stage} is not an interior stage of {pipeline.stages}")
    members = _members(communicators)
    api = calls["api"].astype(str).to_numpy()
    p2p = calls["collective_name"].isin(P2P).to_numpy()
    device = _work(calls)
    work = device & ~_received_gathers(calls, device, p2p)
    exchanges: list[tuple[int, int, str]] = []  # [start, end) of each exchange and its kind
    n, i = len(calls), 0
    while i < n:
        if not p2p[i]:
            i += 1
            continue
        start = i
        while start > 0 and not work[start - 1] and not (exchanges and start - 1 < exchanges[-1][1]):
            start -= 1
        end, kind, launch, depth = start, [], [], 0
        while end < n and not work[end]:
            depth += api[end] == "ncclGroupStart"
            if p2p[end]:
                launch.append(_direction(calls, end, members, pipeline, stage))
            if api[end] == "ncclGroupEnd" and depth:
                depth -= 1
            if launch and not depth:
                kind.append("".join(sorted(launch)))
                launch = []
            end += 1
        exchanges.append((start, end, ",".join(kind)))
        i = end
    if not exchanges:
        raise ScheduleError(f"stage {stage} makes no point-to-point exchange")
    kinds = [k for _, _, k in exchanges]
    microbatches, counted, extra = _schedule_of(kinds, pipeline.stages, stage)
    pattern = Split(stage, microbatches, counted, [], [], [], extra).pattern(pipeline.stages, stage)
    exchanges_per_step = (len(pattern) + 1) // 2
    steps, rest = divmod(len(kinds), exchanges_per_step)
    step_kinds = [launches_of(label) for label in pattern[::2]]
    if kinds[: steps * exchanges_per_step] != step_kinds * steps or (rest and kinds[-rest:] != step_kinds[:rest]):
        raise ScheduleError(
            f"stage {stage}'s steps do not all follow the "
            f"{'interleaved' if extra is not None else '1F1B'} schedule of {microbatches} micro-batches"
        )
    pieces, labels, step = [(0, exchanges[0][0])], ["head"], [-1]
    for k, (start, end, _) in enumerate(exchanges):
        t, at = divmod(k, exchanges_per_step)
        pieces.append((start, end))
        labels.append(pattern[2 * at] if t < steps else "tail")
        step.append(t if t < steps else -1)
        following = exchanges[k + 1][0] if k + 1 < len(exchanges) else n
        if t >= steps or at == exchanges_per_step - 1:
            last = k + 1 == len(exchanges)
            pieces.append((end, following))
            labels.append("tail" if last else "between")
            step.append(-1)
        else:
            pieces.append((end, following))
            labels.append(pattern[2 * at + 1])
            step.append(t)
    return Split(stage, microbatches, counted, pieces, labels, step, extra)


def _schedule_of(kinds: list[str], stages: int, stage: int) -> tuple[int, bool, int | None]:
    """`(microbatches, counted, extra)` of the schedule whose first step's exchanges are `kinds`' first: the
    non-interleaved 1F1B schedule (`extra` None) of any micro-batch count, or the interleaved one (`microbatches`
    the virtual micro-batches, `extra` its warm-up's constant) whose warm-up ends at the first exchange that
    receives from `stage + 1`; ScheduleError when none."""
    if "S-" in kinds:
        for microbatches, counted in _step_counts(kinds.index("S-"), stages - stage - 1):
            pattern = schedule(stages, stage, microbatches, counted)
            if kinds[: (len(pattern) + 1) // 2] == pattern[::2]:
                return microbatches, counted, None
    warmup = next((k for k, launches in enumerate(kinds) if "R+" in launches.split(",")), 0)
    extra = warmup - 2 * (stages - stage - 1)
    virtual = kinds.index("S-") // 2 if "S-" in kinds else 0  # a step's last exchange, its 2 virtual + 1st
    if kinds[0] == "R-" and extra >= 0 and virtual > warmup:
        pattern = interleaved_schedule(stages, stage, virtual, extra)
        if kinds[: len(pattern) // 2 + 1] == [launches_of(label) for label in pattern[::2]]:
            return virtual, False, extra
    raise ScheduleError(
        f"stage {stage}'s exchanges ({', '.join(kinds[:4])}, ...) follow neither the 1F1B schedule nor the "
        "interleaved one with overlapped point-to-point communication"
    )


def _step_counts(blocks: int, ahead: int) -> list[tuple[int, bool]]:
    """The `(microbatches, counted)` whose 1F1B step (`schedule`) has `blocks` blocks, fewest micro-batches first:
    `2 m` forwards and backwards, plus `min(ahead, m)` token counts when counted (`ahead`: the stages after this
    one). A 1F1B step's only exchange that is a lone send to `stage - 1` (`S-`) is its last, so the first `S-` of a
    stage's exchanges gives its blocks a step, and only these counts can match."""
    out = [(blocks // 2, False)] if blocks % 2 == 0 else []
    out += [(m, True) for m in ((blocks - ahead) // 2, blocks // 3) if 2 * m + min(ahead, m) == blocks]
    return sorted({(m, c) for m, c in out if m >= 1})


def rebuild(cut: Split, stages: int, stage: int) -> list[tuple[int, int]]:
    """The row ranges of `cut`'s calls, in the order interior `stage` runs them (module docstring); ScheduleError
    when `stage` makes an exchange the cut stage never made."""
    if not 0 < stage < stages - 1:
        raise ScheduleError(f"stage {stage} is not an interior stage of {stages}")
    pattern = cut.pattern(stages, stage)
    by_step: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for piece, label, t in zip(cut.pieces, cut.labels, cut.step):
        by_step.setdefault(t, {}).setdefault(label, []).append(piece)
    out: list[tuple[int, int]] = []
    for piece, label, t in zip(cut.pieces, cut.labels, cut.step):
        if t < 0:
            out.append(piece)
            continue
        if label != pattern[0] or piece != by_step[t][label][0]:
            continue  # each step is emitted once, at its first exchange
        used: dict[str, int] = {}
        for wanted in pattern:
            own = by_step[t].get(wanted)
            if not own:
                raise ScheduleError(
                    f"stage {stage} makes exchanges {wanted} that stage {cut.stage} never makes "
                    f"({cut.microbatches} micro-batches on {stages} stages)"
                )
            out.append(own[used.get(wanted, 0) % len(own)])
            used[wanted] = used.get(wanted, 0) + 1
            count = f"T{wanted[1:]}"
            if wanted[0] == "F" and count in by_step[t] and count not in pattern:
                out += by_step[t][count]  # a warm-up forward there, a steady one here: its count ends it
    return out


@lru_cache(maxsize=1)
def rule_digest() -> str:
    """Of this module's source: stored with a capture's rebuild (`stage_rebuild.rule`), so a trace read by another
    rule is checked again against its captured stages (`simulator/trace.py`) rather than trusted."""
    path = Path(__file__)
    return files_digest("pipeline_stages", [(path, path.parent)])


def check_rebuilds(cut: Split, stages: int) -> None:
    """ScheduleError when an interior stage of `stages` rebuilt from `cut` (those of its parity under the
    interleaved schedule, `source`) makes an exchange `cut`'s stage never makes (with 2 to `stages - 3` micro-batches
    stage 1 has no steady state, while a stage nearer the end has one)."""
    for stage in range(1, stages - 1):
        if source(stage, INTERLEAVED_SOURCES if cut.extra is not None else (cut.stage,)) == cut.stage:
            rebuild(cut, stages, stage)


INTERLEAVED_SOURCES = (1, 2)
"""The stages interior stages are rebuilt from under the interleaved schedule: stage 1 for odd stages, 2 for even
ones. An odd stage receives before it sends, an even one sends first (`interleaved_schedule`), and the calls differ
by more than the launches' order: the first launch's end event is polled again before the second launch (seen in
Megatron-LM core_r0.19.0 captures), so the emulator finds an even stage's send complete by its `Work.wait()`
(`emulator/native/completion.c`), which then makes no stream wait, while an odd stage's send is still running and
waited for."""


def source(stage: int, sources: tuple[int, ...] | list[int]) -> int:
    """The stage of `sources` that interior `stage` is rebuilt from: the one `stage` is a multiple of `len(sources)`
    stages from (one source: it; `INTERLEAVED_SOURCES`: by parity)."""
    return sources[(stage - sources[0]) % len(sources)]


def differing_stage_options(argv: list[str]) -> str | None:
    """The first option of `argv` that can give Megatron-LM's pipeline stages different layers (`STAGE_OPTIONS`),
    as it was given; None when there is none."""
    for k, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        if name in STAGE_OPTIONS:
            value = value or (argv[k + 1] if k + 1 < len(argv) else "")
            marker = STAGE_OPTIONS[name]
            if marker is None or marker in value:
                return f"{name} {value}".strip()
    return None


def given_option(argv: list[str], options: dict[str, str]) -> str | None:
    """The first of `options` that `argv` gives (as `--name` or `--name=value`); None when it gives none."""
    return next((arg.partition("=")[0] for arg in argv if arg.partition("=")[0] in options), None)


def rows(pieces: list[tuple[int, int]]) -> np.ndarray:
    """The rows of `pieces`, in order."""
    return np.concatenate([np.arange(a, b) for a, b in pieces]) if pieces else np.zeros(0, np.int64)


def moved_communicators(communicators: pd.DataFrame, pipeline: Pipeline, shift: int) -> pd.DataFrame:
    """`communicators` of a rank moved `shift` stages on: each group's members translated, a group that maps onto
    itself (spanning the pipeline) kept as it is."""
    out = communicators.copy()
    out["ranks"] = [_moved_group(ranks, pipeline, shift) for ranks in communicators["ranks"]]
    return out


def _moved_group(ranks, pipeline: Pipeline, shift: int):
    """A group's members moved `shift` stages on (`moved_communicators`)."""
    if ranks is None or not len(ranks):
        raise ScheduleError("a process group's members are not listed: it cannot be moved to another stage")
    moved = [pipeline.translate(int(r), shift) for r in ranks]
    return ranks if sorted(moved) == sorted(int(r) for r in ranks) else np.array(moved, dtype=np.asarray(ranks).dtype)


def moved_peers(calls: pd.DataFrame, communicators: pd.DataFrame, pipeline: Pipeline, shift: int) -> np.ndarray:
    """`calls`' `peer_rank` (a communicator rank) once the rank moves `shift` stages on with its groups
    (`moved_communicators`): the peer's global rank moved likewise, found in the moved group."""
    members = _members(communicators)
    moved = _members(moved_communicators(communicators, pipeline, shift))
    peers = calls["peer_rank"].to_numpy(dtype="float64", na_value=np.nan).copy()
    comms = calls["comm_id"].astype(object).to_numpy()
    for i in np.flatnonzero(~np.isnan(peers)):
        ranks, there = members.get(str(comms[i]), []), moved.get(str(comms[i]), [])
        if 0 <= int(peers[i]) < len(ranks):
            peers[i] = there.index(pipeline.translate(ranks[int(peers[i])], shift))
    return peers


def difference(
    rebuilt: pd.DataFrame,
    rebuilt_communicators: pd.DataFrame,
    captured: pd.DataFrame,
    captured_communicators: pd.DataFrame,
    kernel_names: tuple[dict, dict],
) -> str | None:
    """How a rebuilt stage's calls differ from that stage's capture, or None when they agree: the same calls in the
    same order with the same kernels (by name, integer template arguments left out: `TEMPLATE_INTEGER`), launch
    shapes, GEMM shapes, copy sizes, collectives and message sizes, point-to-point peers (global ranks), each
    collective's group (its members' global ranks, by communicator rank) and each event wait's record (the call
    it waits for, by position: event ids may be numbered otherwise). Ignored: timestamps and durations, threads,
    streams, op and correlation ids, collective sequence numbers, and polls (`cudaEventQuery`: their count depends
    on how long the capture ran)."""
    frames = []
    for calls, communicators, names in (
        (rebuilt, rebuilt_communicators, kernel_names[0]),
        (captured, captured_communicators, kernel_names[1]),
    ):
        keep = ~calls["api"].astype(str).isin(POLLS).to_numpy()
        frame = calls.loc[keep, list(COMPARED)].astype(object).reset_index(drop=True)
        frame["kernel_id"] = [
            TEMPLATE_INTEGER.sub("LiE", names.get(k, "")) if pd.notna(k) else None for k in frame["kernel_id"]
        ]
        kept = calls.loc[keep].reset_index(drop=True)
        frame["peer"] = global_peers(kept, communicators)
        members = _members(communicators)
        frame["group"] = [
            tuple(members.get(str(c), ())) if pd.notna(c) else None for c in kept["comm_id"].astype(object)
        ]
        frame["waits_for"] = _event_links(kept)
        frames.append([tuple(None if _missing(v) else v for v in row) for row in frame.itertuples(index=False)])
    ours, theirs = frames
    names = (*COMPARED, "peer", "group", "waits_for")
    for k, (mine, other) in enumerate(zip(ours, theirs)):
        if mine != other:
            column, x, y = next((c, x, y) for c, x, y in zip(names, mine, other) if x != y)
            return f"call {k} (polls left out): {mine[0]} with {column} {x!r} rebuilt, {other[0]} with {y!r} captured"
    if len(ours) != len(theirs):
        return f"{len(ours)} calls rebuilt, {len(theirs)} captured (polls left out)"
    return None


def rebuilt_difference(
    calls: pd.DataFrame,
    communicators: pd.DataFrame,
    pipeline: Pipeline,
    cut: Split,
    stage: int,
    own: tuple[pd.DataFrame, pd.DataFrame],
    kernel_names: tuple[dict, dict],
) -> str | None:
    """How stage `stage` rebuilt from `cut`'s calls (`rebuilt_calls`) differs from `own` (its captured calls and
    communicators, `seq` order) from their first exchange on (`difference`; None: not at all). What comes before
    (`head`: initialization) is left out: Megatron-LM warms its torch.compile'd fused functions up there
    (`_warmup_jit_function`), and one rank may autotune a kernel (device syncs, memsets, the kernel launched again)
    where another finds its configuration in the job's shared compile cache (seen: PP 8, stage 6 autotuned
    `triton_poi_fused_add_mul_tanh_0`, stage 2 did not), which is no difference in the steps."""
    rebuilt, moved = rebuilt_calls(calls, communicators, pipeline, cut, stage)
    start = split(own[0], own[1], pipeline, stage).pieces[0][1]
    return difference(
        rebuilt.iloc[cut.pieces[0][1] :].reset_index(drop=True),
        moved,
        own[0].iloc[start:].reset_index(drop=True),
        own[1],
        kernel_names,
    )


def _missing(value: object) -> bool:
    """Whether a compared value is absent (None, NaN, pd.NA; a group is a tuple, never absent)."""
    return not isinstance(value, tuple) and pd.isna(value)


def _event_links(calls: pd.DataFrame) -> list[int | None]:
    """Per call, the position of the record an event wait is linked to (the latest earlier record of its event id,
    as the simulator links them), -1 for a wait with no earlier record; None for other calls."""
    latest: dict[float, int] = {}
    out: list[int | None] = []
    for k, (api, event) in enumerate(zip(calls["api"].astype(str), calls["event_id"].astype(object))):
        link = None
        if pd.notna(event) and api in RECORDS:
            latest[float(event)] = k
        elif pd.notna(event) and api in WAITS:
            link = latest.get(float(event), -1)
        out.append(link)
    return out


def global_peers(calls: pd.DataFrame, communicators: pd.DataFrame) -> list:
    """Each call's point-to-point peer (`peer_rank`, a communicator rank) as a global rank (None: no peer)."""
    members = _members(communicators)
    peers = calls["peer_rank"].to_numpy(dtype="float64", na_value=np.nan)
    out: list = []
    for comm, peer in zip(calls["comm_id"].astype(object), peers):
        ranks = members.get(str(comm), [])
        out.append(ranks[int(peer)] if not np.isnan(peer) and 0 <= int(peer) < len(ranks) else None)
    return out


def _spans(calls: pd.DataFrame, pieces: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Per piece of `calls`, `(begin, end, offset)`: the time span it covers (to the next piece's first call, the
    last piece to its last call) and how far it moves, laid end to end from the first call's time."""
    start = calls["start_ns"].to_numpy(dtype="int64")
    clock = int(start[0]) if len(start) else 0
    out = []
    for a, b in pieces:
        begin = int(start[a]) if a < len(start) else int(start[-1]) + 1
        end = int(start[b]) if b < len(start) else int(start[b - 1]) + 1
        out.append((begin, end, clock - begin))
        clock += end - begin
    return out


def rebuilt_calls(
    calls: pd.DataFrame, communicators: pd.DataFrame, pipeline: Pipeline, cut: Split, stage: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage `stage`'s `(calls, communicators)` rebuilt from the cut stage's (`rebuild`): calls renumbered in their new
    order, each piece moved in time as a whole (its calls keep their offsets and the gaps before them, so host time
    between calls is what it was), peers and groups moved by the stage difference."""
    pieces = rebuild(cut, pipeline.stages, stage)
    shift = stage - cut.stage
    order = rows(pieces)
    out = calls.iloc[order].reset_index(drop=True)
    spans = _spans(calls, pieces)
    moved = np.repeat([offset for _, _, offset in spans], [b - a for a, b in pieces]).astype(np.int64)
    out["seq"] = np.arange(len(out), dtype=out["seq"].dtype)
    out["start_ns"] = out["start_ns"].to_numpy(dtype="int64") + moved
    if "device_start_ns" in out:
        device = out["device_start_ns"]
        out["device_start_ns"] = device + pd.array(moved, dtype=device.dtype if device.dtype.kind in "iu" else None)
    out["peer_rank"] = pd.array(moved_peers(calls, communicators, pipeline, shift)[order], dtype="Int64")
    return out, moved_communicators(communicators, pipeline, shift)


def rebuilt_ops(calls: pd.DataFrame, ops: pd.DataFrame, pipeline: Pipeline, cut: Split, stage: int) -> pd.DataFrame:
    """Stage `stage`'s ops rebuilt with `rebuilt_calls`: those that began within each piece, moved with it (a piece
    used twice, an exchange kind the cut stage made fewer times, repeats its ops; those of a piece not used are left
    out), then those before the first call or after the last, as they were."""
    start = calls["start_ns"].to_numpy(dtype="int64")
    op_start = ops["start_ns"].to_numpy(dtype="int64") if len(ops) else np.zeros(0, np.int64)
    by_start = np.argsort(op_start, kind="stable")  # the ops that began within a piece: a slice of these
    sorted_start = op_start[by_start]
    op_rows, op_offsets = [], []
    for begin, end, offset in _spans(calls, rebuild(cut, pipeline.stages, stage)):
        inside = np.sort(by_start[np.searchsorted(sorted_start, begin) : np.searchsorted(sorted_start, end)])
        op_rows.append(inside)
        op_offsets.append(np.full(len(inside), offset, dtype=np.int64))
    picked = np.concatenate(op_rows) if op_rows else np.zeros(0, np.int64)
    last = int(start[-1]) + 1 if len(start) else 0
    outside = (op_start < (int(start[0]) if len(start) else 0)) | (op_start >= last)
    outside[picked] = False
    kept = np.flatnonzero(outside)  # before the first call or after the last: as they were
    new_ops = pd.concat([ops.iloc[picked], ops.iloc[kept]], ignore_index=True)
    op_moved = np.concatenate([*op_offsets, np.zeros(len(kept), np.int64)])
    for column in ("start_ns", "end_ns"):
        if column in new_ops:
            values = new_ops[column]
            new_ops[column] = values + pd.array(op_moved, dtype=values.dtype if values.dtype.kind in "iu" else None)
    return new_ops
