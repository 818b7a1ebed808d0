"""What the user should know about a prediction, in words: why it runs out of memory, and notes on what the
capture stood in for (host reads of device values, assumed routing, ranks not captured) and on the evaluation
passes the steady state leaves out."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import numpy as np

from maya.core.hardware import Hardware
from maya_trace_spec import children
from maya_trace_spec.vocabulary import EVAL_RANGE

from .device_time import TIMING_API
from .distinct import contains, per_distinct
from .iterations import evaluating
from .oom import recorded_ooms
from .trace import TraceSet

if TYPE_CHECKING:
    from .simulation import Simulation


def out_of_memory(
    traces: TraceSet, memory: dict[int, tuple[int, bool]], peak_memory: int, hw: Hardware
) -> tuple[str | None, str | None]:
    """Why the job runs out of memory (None: it does not), and a note on failed allocations it survived.

    A failed device allocation is not an out-of-memory failure by itself: PyTorch's caching allocator then
    frees its cached blocks and retries, as it does on a GPU. The script ran out only when the error reached
    it: the capture's status is `oom`, or the run failed on a rank where an allocation failed. Otherwise the
    peak must fit the GPU priced (another, smaller GPU than the one emulated may not hold it)."""
    failed = sorted(rank for rank, (_, oom) in memory.items() if oom)
    counted = [rank for rank in failed if "rebuilt_from" not in traces.ranks[rank].device]  # once, as captured
    status = traces.info["status"]
    if status == "oom" or (status == "failed" and failed):
        ooms = recorded_ooms(traces)
        return (ooms[0].describe() if ooms else "the trace records an out-of-memory failure"), None
    if peak_memory > hw.memory_bytes:
        return f"peak {peak_memory / 2**30:.2f} GiB exceeds {hw.memory_bytes / 2**30:.2f} GiB", None
    if not failed:
        return None, None
    counts = {rank: int((traces.ranks[rank].memory["kind"] == "oom").sum()) for rank in counted}
    shown = ", ".join(f"rank {rank}: {n}" for rank, n in list(counts.items())[:4])
    return None, (
        f"{sum(counts.values())} device allocation(s) failed ({shown}{' ...' if len(counts) > 4 else ''}) "
        "and the script went on: PyTorch's caching allocator freed its cached blocks and retried, as on a "
        "GPU, where each retry also synchronises the device (not priced)"
    )


KNOWN_READS = r'"stand_in": "(?:computed|routed)"'
"""Host reads of values the emulator computed on the host (`host_values.cpp`): real given the inputs,
or following an assumed routing (which `routing_notes` reports)."""
SCALAR_READS = {"aten::_local_scalar_dense", "aten::item"}
"""Ops whose host reads of device values are scalars (`.item()`: loss logging), not shapes."""


def stand_in_notes(traces: TraceSet) -> list[str]:
    """A note on the emulated host reads of device values that can decide shapes or control flow (e.g.
    `nonzero` in MoE routing): the emulator answered them with stand-ins, so the program that ran may
    differ from a real run's. Scalar reads (`.item()`) alone say nothing."""
    counts: dict[str, int] = {}
    for trace in traces.ranks.values():
        calls = trace.calls
        if "data_dependent" not in calls or not calls["data_dependent"].fillna(False).any():
            continue
        read = calls["data_dependent"].fillna(False).astype(bool) & (calls["api"] != TIMING_API)  # timings: own note
        read = read.to_numpy(dtype=bool, copy=True)
        if "args" in calls:  # values the emulator computed on the host from values it knew are not stand-ins
            read[read] = ~per_distinct(
                calls["args"][read], lambda text: re.search(KNOWN_READS, text) is not None, False, bool
            )
        read_ops = calls.loc[read, "op_id"]
        ops = trace.ops[trace.ops["op_id"].isin(read_ops)] if len(trace.ops) else trace.ops
        names = dict(zip(ops["op_id"].tolist(), ops["name"].tolist())) if len(ops) else {}
        for op in read_ops.tolist():
            name = names.get(op, "(no op)") if op == op else "(no op)"
            counts[name] = counts.get(name, 0) + 1
    if not set(counts) - SCALAR_READS:
        return []
    top = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
    return [
        f"{sum(counts.values())} host reads of device values got emulated stand-ins ({top}): shapes or "
        "control flow that depend on them (MoE routing, dynamic shapes) may differ from a real run"
    ]


def evaluation_notes(sim: Simulation) -> list[str]:
    """A note on the evaluation passes (the model called in eval mode or under inference mode) that the steady
    state leaves out: how long each took in the replay, so that a script that validates every k iterations
    (nanoGPT's `estimate_loss`, a Trainer's validation loop) can add it, spread over those k."""
    passes = []
    for rep, result in zip(sim.replicas, sim.results):
        program = rep.program
        if not rep.captured:
            continue
        trace = sim.traces.ranks[program.rank]
        mask = evaluating(trace)
        if not mask.any():
            continue
        ops = trace.ops
        calls_per_iteration = (
            ops.loc[ops["name"] == EVAL_RANGE].drop_duplicates("op_id").groupby("iteration").size() if len(ops) else {}
        )
        bounds = sim.iterations[program.rank].bounds
        for k in range(len(bounds) - 1):
            idx = np.flatnonzero(mask[bounds[k] : bounds[k + 1]]) + bounds[k]
            if not len(idx):
                continue
            start = float((result.issue[idx] - program.host[idx]).min())
            end = float(max((result.issue[idx] + result.wait[idx]).max(), result.end[idx].max()))
            # a compiled model's first pass in eval mode compiles and autotunes: its timed candidates are in it
            timed = int((trace.calls["api"].iloc[idx.min() : idx.max() + 1] == TIMING_API).sum())
            passes.append((program.rank, k, int(calls_per_iteration.get(k, 0)), end - start, timed))
    if not passes:
        return []
    shown = "; ".join(
        f"rank {rank}, iteration {k}: {span / 1e6:,.1f} ms"
        + (f" ({calls} model call{'s' * (calls > 1)})" if calls else "")
        + (f", with autotuning ({timed} timed candidates)" if timed else "")
        for rank, k, calls, span, timed in passes[:3]
    )
    more = f" and {len(passes) - 3} more" if len(passes) > 3 else ""
    return [
        f"evaluation passes are not in the steady state ({shown}{more}): a script that evaluates every k "
        "iterations spends that much more every k"
    ]


def routing_notes(traces: TraceSet) -> list[str]:
    """A note on routing the emulator assumed: index choices on values only a GPU computes (`topk`, `argmax`,
    `sort`, ... of router logits, or of anything else) got the indices of a balanced router (run attrs
    `routing_stand_ins`, from the emulator's `host_values.cpp`)."""
    per_rank = traces.attrs.get("routing_stand_ins") or {}
    counts: dict[str, int] = {}
    for ops in per_rank.values():
        for name, n in ops.items():
            counts[name] = counts.get(name, 0) + int(n)
    if not counts:
        return []
    top = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return [
        f"routing was assumed: {sum(counts.values())} index choices on values only a GPU computes ({top}) were "
        "given a balanced router's choices (every expert or index its share): an MoE's expert GEMMs and "
        "all-to-alls follow that routing, not a trained router's; indices chosen for anything else (a sort "
        "building flex attention's block mask) are assumed the same way"
    ]


def flex_mask_notes(traces: TraceSet) -> list[str]:
    """A note on flex-attention launches whose BlockMask block counts are values only a GPU computes (a mask
    built inside a compiled model): their blocks were a stand-in's (`triton_work.flex_blocks`)."""
    from . import triton_work

    counts: dict[str, int] = {}
    for trace in traces.ranks.values():
        if "args" not in trace.calls:
            continue
        args = trace.calls["args"]
        launches = args[contains(args, f'"{triton_work.KV_COUNTS[0]}"')].value_counts(sort=False)
        for text, n in launches.items():  # each distinct launch described once
            source = triton_work.describe("flex_attention", str(text)).get("mask")
            if source and source != triton_work.MASK_COUNTED:
                counts[source] = counts.get(source, 0) + int(n)
    if not counts:
        return []
    kinds = ", ".join(f"{n} as a {source}" for source, n in sorted(counts.items()))
    return [
        f"flex attention's block masks are values only a GPU computes in {sum(counts.values())} launches "
        f"({kinds}): the blocks they compute were counted for a causal mask, over documents of the synthetic "
        "FineWeb shards' lengths (log-normal, mean 700 tokens) where the kernel reads per-token document ids, "
        "a context-parallel rank's query shard at its load-balanced share of the whole sequence's blocks; "
        "a sliding window is not applied (an upper bound)"
    ]


USER_KERNEL_PRICES = {
    "elementwise": "torch's add moving their bytes",
    "normalization": "torch's layer norm over their rows",
    "softmax": "torch's softmax over their rows",
}
"""How `triton_work.user_work` prices a user Triton kernel of each family, in the note's words."""
SHOWN_KERNELS = 4


def triton_user_notes(traces: TraceSet) -> list[str]:
    """Notes on user `@triton.jit` kernels (Liger-Kernel's, a script's own): those priced from their launch arguments
    as the kernels of the same work (`triton_work.user_work`), which and how many, and how many of those launches
    carry no `access` (spec 1.5 traces: in-place writes counted once); and the GEMM-like ones (their source
    calls `tl.dot`, the launch's `dot`) priced from their bytes, their FLOPs not counted."""
    from . import triton_work

    kernels: dict[str, set[str]] = {}
    launches: dict[str, int] = {}
    gemm_like: dict[str, int] = {}
    unrecorded = 0  # launches with no tensor's access recorded (a trace of spec 1.5 or before)
    for trace in traces.ranks.values():
        if "args" not in trace.calls:
            continue
        names = dict(zip(trace.kernels["kernel_id"].tolist(), trace.kernels["name"].tolist()))
        user = [k for k, name in names.items() if name and not triton_work.is_inductors(str(name))]
        if not user or "kernel_id" not in trace.calls:
            continue
        # user kernels' launches only (not Inductor's), before the launches are counted
        rows = trace.calls["kernel_id"].isin(user).to_numpy(copy=True)
        rows[rows] = contains(trace.calls["args"][rows], '"triton"')
        if not rows.any():
            continue
        for (kernel_id, text), n in trace.calls.loc[rows, ["kernel_id", "args"]].value_counts(sort=False).items():
            name = str(names.get(kernel_id, ""))
            work = triton_work.describe(name, str(text))
            launch = json.loads(str(text))["triton"]
            if launch.get("dot") and work.get("family") != "gemm":
                gemm_like[name] = gemm_like.get(name, 0) + int(n)
                continue
            how = USER_KERNEL_PRICES.get(work.get("family")) if str(work.get("op")).startswith("inductor_") else None
            if how is not None:
                kernels.setdefault(how, set()).add(name)
                launches[how] = launches.get(how, 0) + int(n)
                if not any(a.get("access") in triton_work.ACCESSES for a in launch.get("args", ())):
                    unrecorded += int(n)
    notes = []
    if launches:
        parts = []
        for how, n in sorted(launches.items(), key=lambda kv: -kv[1]):
            parts.append(f"as {how} ({n}: {_shown(kernels[how])})")
        unsaid = (
            f"; {unrecorded} of them have no recorded access (a trace before spec 1.6, or a source not read): their "
            "in-place writes counted once"
            if unrecorded
            else ""
        )
        notes.append(
            f"{sum(launches.values())} launches of user Triton kernels are priced from their arguments as the kernels "
            f"of the same work, {'; '.join(parts)}: arithmetic beyond their memory traffic is not counted{unsaid}"
        )
    if gemm_like:
        notes.append(
            f"{sum(gemm_like.values())} launches of GEMM-like user Triton kernels (their source calls tl.dot; "
            f"{_shown(set(gemm_like))}) are priced from the bytes of their arguments: their FLOPs are not counted"
        )
    return notes


def _shown(names: set[str]) -> str:
    """At most `SHOWN_KERNELS` kernel names, sorted, and how many more."""
    shown = sorted(names)
    more = f" and {len(shown) - SHOWN_KERNELS} more" if len(shown) > SHOWN_KERNELS else ""
    return ", ".join(shown[:SHOWN_KERNELS]) + more


def te_kernel_notes(traces: TraceSet) -> list[str]:
    """A note on Transformer Engine's own kernels: priced as the eager kernels of the same work (stand-ins, sized by
    the extension call enclosing them: `te_work`), and those without sizes (outside a recorded call)."""
    from . import te_work

    counts: dict[str, int] = {}
    for trace in traces.ranks.values():
        if not te_work.touched(trace.kernels, trace.ops):
            continue
        names = dict(zip(trace.kernels["kernel_id"].tolist(), trace.kernels["name"].tolist()))
        for key, n in te_work.notes(names, trace.calls, trace.ops[["op_id", "name"]].drop_duplicates("op_id")).items():
            counts[key] = counts.get(key, 0) + n
    unsized = counts.pop("unsized", 0)
    out = []
    if counts:
        shown = ", ".join(f"{words} ({n})" for words, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        out.append(
            f"Transformer Engine's own kernels ({sum(counts.values())} launches) are priced as the eager kernels of "
            f"the same work, sized by the TE call that launched them: {shown}"
        )
    if unsized:
        out.append(
            f"{unsized} launches of Transformer Engine's kernels have no sizes (launched outside a recorded TE call, "
            "or of a kind not known): priced as unknown work from their enclosing op"
        )
    return out


FLASH_ATTN_RANGE = "flash_attn_2_cuda::"
"""The ranges Maya's stand-in for flash-attn's extension opens around each call (`standins/flash_attn_2_cuda.py`)."""
FLASH_ATTN_PREFIX = "flash_attn::"
"""flash-attn's own ops (2.7 on: `torch.library` custom ops around its extension's calls): the calls' parents in
traces captured before the stand-in named its calls."""
TORCH_FLASH_OPS = ("aten::_flash_attention_forward", "aten::_flash_attention_backward")
VARLEN_CALLS = (
    f"{FLASH_ATTN_RANGE}varlen_fwd",
    f"{FLASH_ATTN_RANGE}varlen_bwd",
    "flash_attn::_flash_attn_varlen_forward",
    "flash_attn::_flash_attn_varlen_backward",
)
"""torch's FlashAttention-2 port: inside one of these, Maya's stand-in for flash-attn's extension ran it."""


def _flash_attn_call(name: object) -> bool:
    """Whether an op is a call of flash-attn's extension: the stand-in's range, or flash-attn's custom op."""
    return str(name).startswith((FLASH_ATTN_RANGE, FLASH_ATTN_PREFIX))


def flash_attn_notes(traces: TraceSet) -> list[str]:
    """A note on flash-attn calls that ran on Maya's stand-in for its CUDA extension (`emulator/standins/
    flash_attn_2_cuda.py`): torch's port of the same kernels, and the copies its gradients of views added."""
    calls = copies = varlen = 0
    for trace in traces.ranks.values():
        ops = trace.ops
        if not per_distinct(ops["name"], _flash_attn_call, False, bool).any():  # millions of rows: distinct names
            continue
        asked = ops[ops["name"].isin([*TORCH_FLASH_OPS, "aten::copy_"]).to_numpy()]
        parents = ops["name"].set_axis(ops["op_id"]).reindex(asked["parent_op_id"]).fillna("").astype(str)
        inside = per_distinct(parents, _flash_attn_call, False, bool)
        ran = inside & asked["name"].isin(TORCH_FLASH_OPS).to_numpy()  # compiling calls the fakes: no such op inside
        calls += int(ran.sum())
        varlen += int((ran & parents.isin(VARLEN_CALLS).to_numpy()).sum())
        copies += int((inside & (asked["name"] == "aten::copy_").to_numpy()).sum())
    if not calls:
        return []
    copied = (
        f"; {copies} gradient(s) into buffers that share their memory (the packed variants' views) were copied, "
        "copies flash-attn's kernel does not make, priced as copies, and held beside its buffers until then"
        if copies
        else ""
    )
    packed = (
        f"; {varlen} variable-length call(s) are priced at their sequences' mean length (the lengths are device "
        "values: a lower bound of the work when they differ)"
        if varlen
        else ""
    )
    return [
        f"{calls} flash-attn call(s) ran on Maya's stand-in for its CUDA extension (flash-attn's Python code, "
        "installed without its CUDA build): torch's port of the same FlashAttention-2 kernels, priced as "
        f"FlashAttention-2{copied}{packed}"
    ]


GROUPED_GEMM_PREFIX = "grouped_gemm::"
"""The ranges Maya's stand-in for grouped_gemm's extension opens around each call (`standins/grouped_gemm_backend.py`)."""


def _range_counts(traces: TraceSet, prefix: str) -> dict[str, int]:
    """How many ranges of each name under `prefix` (a stand-in's calls) the captured ranks hold, the prefix removed."""
    counts: dict[str, int] = {}
    for trace in traces.ranks.values():
        names = trace.ops["name"]
        ours = per_distinct(names, lambda name: str(name).startswith(prefix), False, bool)
        if ours.any():  # a rank's ops run to millions of rows: their distinct names are read first
            for name, n in names[ours].value_counts().items():
                call = str(name).removeprefix(prefix)
                counts[call] = counts.get(call, 0) + int(n)
    return dict(sorted(counts.items()))


def grouped_gemm_notes(traces: TraceSet) -> list[str]:
    """A note on grouped_gemm calls that ran on Maya's stand-in for its CUDA extension, by call."""
    counts = _range_counts(traces, GROUPED_GEMM_PREFIX)
    if not counts:
        return []
    calls = ", ".join(f"{name} {n}" for name, n in counts.items())
    moved = (
        "; permute and unpermute as torch's sort, gathers and embedding_bag, unpermute's backward as gathers, a "
        "batched product and a scale (more kernels than the fork's one)"
        if set(counts) - {"gmm"}
        else ""
    )
    return [
        f"{sum(counts.values())} grouped_gemm call(s) ({calls}) ran on Maya's stand-in for its CUDA extension "
        "(grouped_gemm's Python code, installed without its CUDA build): each gmm as one cuBLAS GEMM per expert, as "
        "its builds without CUTLASS run them (NVIDIA's fork over 4 side streams); a CUTLASS build (the fork's for "
        "sm_80, the original's with GROUPED_GEMM_CUTLASS=1) runs a product without trans_b as one grouped kernel: not "
        f"modelled{moved}"
    ]


MEGABLOCKS_PREFIX = "megablocks_ops::"
"""The ranges Maya's stand-in for MegaBlocks' extension opens around each call (`standins/megablocks_ops.py`)."""


def megablocks_notes(traces: TraceSet) -> list[str]:
    """A note on MegaBlocks' extension calls that ran on Maya's stand-in for it, by call."""
    counts = _range_counts(traces, MEGABLOCKS_PREFIX)
    if not counts:
        return []
    calls = ", ".join(f"{name} {n}" for name, n in counts.items())
    return [
        f"{sum(counts.values())} MegaBlocks extension call(s) ({calls}) ran on Maya's stand-in for its CUDA extension "
        "(MegaBlocks' Python code, installed without its CUDA build): torch's kernels for the same work (a stable "
        "sort, a scatter-add, cumulative sums, ...), more than MegaBlocks' one cub call each"
    ]


def subset_notes(traces: TraceSet) -> list[str]:
    """A note on ranks `maya emulate --ranks` did not capture and a captured rank of their pipeline stage stands
    for (run attrs `represents_assumed`, from the emulator's `subset.py`): an SPMD job is assumed, unverified."""
    assumed = traces.attrs.get("represents_assumed") or {}
    if not assumed:
        return []
    parts = "; ".join(
        f"rank {rep} for {_ranges(ranks)}" for rep, ranks in sorted(assumed.items(), key=lambda kv: int(kv[0]))
    )
    return [
        f"SPMD assumed: {sum(map(len, assumed.values()))} rank(s) were not captured (--ranks) and replay the "
        f"capture of a rank of their pipeline stage ({parts}), unverified: work only those ranks do differently "
        "(rank-specific logging, uneven shards) is not in the prediction"
    ]


def child_process_notes(traces: TraceSet) -> list[str]:
    """A note on processes a captured rank started that made device calls (run attrs `child_processes`, from the
    emulator's `child_processes.py`): the stubs counted them, the trace lacks them, so that work is not priced. Only
    captured ranks' children are counted: under deduplication the ranks a capture stands for add none."""
    found = children.working(traces.attrs)
    if not found:
        return []
    calls = sum(c["device_calls"] for reports in found.values() for c in reports)
    first = next(iter(found.values()))[0]
    represented = sum(len(t.represents) for t in traces.ranks.values())
    captured = (
        f"; the count is the {len(traces.ranks)} captured ranks', not multiplied for the {represented} ranks they "
        "stand for"
        if represented > len(traces.ranks)
        else ""
    )
    return [
        f"not priced: {sum(map(len, found.values()))} process(es) started by rank(s) {_ranges(list(found))} made "
        f"{calls:,} device call(s) the capture does not hold (the first: {first.get('first_device_api')} in pid "
        f"{first.get('pid')}, {children.origin(first, 60)}); Maya captures each rank's own process, so the "
        f"prediction lacks that work{captured}"
    ]


def dedup_notes(traces: TraceSet) -> list[str]:
    """Notes on deduplication's classes of equivalent ranks that were not verified, or on why every rank was captured
    (run attrs `dedup`, from the emulator's `dedup.py`)."""
    found = traces.attrs.get("dedup") or {}
    notes = [f"deduplication refused: {found['refused']}"] if "refused" in found else []
    unverified = found.get("unverified") or {}
    if unverified:
        parts = "; ".join(
            f"rank {probe}'s differ from rank {rep}'s"
            for rep, probe in sorted(unverified.items(), key=lambda kv: int(kv[0]))
        )
        notes.append(
            f"deduplication unverified: in {len(unverified)} class(es) of equivalent ranks a member's calls differ "
            f"from those of the rank replayed for it ({parts}); the classes were not split "
            f"({found.get('unverified_reason', 'reason not recorded')}), so the prediction may be wrong "
            "(`maya emulate --no-dedup` captures every rank)"
        )
    return notes


def stage_rebuild_notes(traces: TraceSet) -> list[str]:
    """A note on interior pipeline stages rebuilt from stage 1's capture, or on why every stage was captured (run
    attrs `stage_rebuild`, from the emulator's `dedup.py`)."""
    rebuild = traces.attrs.get("stage_rebuild") or {}
    if "refused" in rebuild:
        return [f"every pipeline stage was captured: interior stages could not be rebuilt ({rebuild['refused']})"]
    if "reason" in rebuild:
        return [f"every pipeline stage was captured: {rebuild['reason']}"]
    if not rebuild.get("rebuilt"):
        return []
    sources = rebuild["from"]
    source = f"stage {sources}" if isinstance(sources, int) else "stage 1 (odd stages) or 2 (even ones)"
    checked = rebuild["checked"]
    checked = [checked] if isinstance(checked, int) else checked  # traces captured before stage P - 2 was checked
    return [
        f"{rebuild.get('schedule', '1F1B')} stages rebuilt: pipeline stages {_ranges(rebuild['rebuilt'])} of "
        f"{rebuild['stages']} were not captured; each replays {source}'s forwards and backwards of its "
        f"{rebuild['microbatches']} {'virtual ' if rebuild.get('schedule') else ''}micro-batches "
        "in its own warm-up, steady and cool-down order, with its peers and groups moved (stages "
        f"{' and '.join(str(s) for s in checked)} rebuilt so were checked against their own captures: the "
        f"same calls in the same order); their peak memory is {source}'s (the trace holds the allocator's segments, "
        "not each tensor)"
        + (
            f"; under the interleaved schedule {source} runs a longer warm-up than a stage nearer the end "
            "(`2 (P - s - 1) + (V - 1) N` forwards), so holds more micro-batches' activations in flight: their peak "
            "can be well above their own"
            if rebuild.get("schedule") == "interleaved"
            else ""
        )
    ]


def _ranges(ranks: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `1-3, 7`."""
    out: list[list[int]] = []
    for r in sorted(ranks):
        if out and out[-1][1] == r - 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)


def host_notes(sim: Simulation, iteration_ns: float, host_bound_ns: float) -> list[str]:
    """A note on the framework's host time read from an emulated trace (`durations.framework`): per steady
    iteration of the captured rank that spends the most, its share of the predicted step and, when the host factor
    added it, how long the GPU waited on the host; otherwise that it was not added."""
    if sim.provider.measures_host_time or not iteration_ns:
        return []
    per_step = []
    for rank, program in sim.programs.items():
        steady = sim.iterations[rank]
        if program.frame is None or not len(steady.steady):
            continue
        framework = program.frame["framework_ns"].to_numpy()
        sums = np.add.reduceat(framework, steady.bounds[:-1])[steady.steady]
        per_step.append((float(np.median(sums)), rank))
    if not per_step or not max(per_step)[0]:
        return []
    ns, rank = max(per_step)
    read = (
        "framework host time (Python, dispatch, hooks between device calls) read on the emulating CPU: "
        f"{ns / 1e6:.2f} ms a step on rank {rank} ({ns / iteration_ns:.0%} of the predicted step)"
    )
    if not sim.host_factor:
        return [f"{read}; not added to the prediction (MAYA_HOST_FACTOR=1 adds it as is: docs/host-time.md)"]
    return [
        f"{read}, added x {sim.host_factor:g} for the target host: the GPU waits on the host "
        f"{host_bound_ns / 1e6:.2f} ms ({host_bound_ns / iteration_ns:.0%}) of the step"
    ]
