"""Algorithm-only evaluator for benchmarks/search.py --analytical: a 64-GPU Megatron-style GPT-7B job
priced by an analytical model (compute, TP/DP communication, pipeline bubble, memory of weights,
optimizer state and activations). No script is emulated: this measures the search (algorithm, rules,
log), never the emulator."""

from __future__ import annotations

from maya.search import Outcome

GPUS, LAYERS, HIDDEN, SEQ, PARAMS = 64, 32, 4096, 4096, 7e9
PEAK, HBM, NVLINK, IB = 989e12, 80 * 2**30, 370e9, 48e9
SPACE = {
    "parameters": {
        "tp": {"values": [1, 2, 4, 8], "role": "tp"},
        "pp": {"values": [1, 2, 4, 8], "role": "pp"},
        "mbs": [1, 2, 4],
        "microbatches": {"values": [4, 8, 16, 32], "role": "microbatches"},
        "recompute": {"values": [False, True], "role": "recompute", "flag": "--recompute-activations"},
        "sp": {"values": [False, True], "role": "sequence_parallel", "flag": "--sequence-parallel"},
        "zero": {"values": [False, True], "role": "distributed_optimizer", "flag": "--use-distributed-optimizer"},
    },
    "derived": {"dp": "gpus // (tp * pp)"},
    "constraints": ["gpus % (tp * pp) == 0", "not sp or tp > 1", "mbs * microbatches * dp >= 128"],
    "tokens_per_iteration": f"mbs * microbatches * dp * {SEQ}",
}
COMMAND = [
    "pretrain_gpt.py",
    "--tp",
    "{tp}",
    "--pp",
    "{pp}",
    "--mbs",
    "{mbs}",
    "--microbatches",
    "{microbatches}",
    "{recompute}",
    "{sp}",
    "{zero}",
]


def model(task, known) -> Outcome:
    """Iteration time and peak memory of one point, from the command line."""
    a = task.argv
    tp, pp, mbs, m = (int(a[a.index(f) + 1]) for f in ("--tp", "--pp", "--mbs", "--microbatches"))
    recompute, sp, zero = (
        "--recompute-activations" in a,
        "--sequence-parallel" in a,
        "--use-distributed-optimizer" in a,
    )
    dp = GPUS // (tp * pp)
    tokens = mbs * SEQ
    flops = 6 * PARAMS * tokens / (tp * pp) * (4 / 3 if recompute else 1)
    efficiency = 0.55 * min(1.0, tokens / (8 * SEQ)) ** 0.15 * (1 - 0.04 * (tp - 1) ** 0.5)
    step = flops / (PEAK * efficiency)
    tp_bytes = 4 * 2 * tokens * HIDDEN * LAYERS / pp * (tp - 1) / tp * 2
    step += tp_bytes / NVLINK * (0.8 if sp else 1.0)
    pipe = step * (m + pp - 1) + (pp > 1) * m * 2 * tokens * HIDDEN * 2 / IB
    grads = 2 * PARAMS / (tp * pp) * 2 * (dp - 1) / dp / (IB if tp * pp < 8 else NVLINK)
    weights = PARAMS / (tp * pp) * (2 + 2 + (12 / dp if zero else 12))
    act_layer = SEQ * mbs * HIDDEN * (34 / (tp if sp else 1) + 5 * 32 * SEQ / HIDDEN / tp)
    acts = (2 * SEQ * mbs * HIDDEN * LAYERS / pp if recompute else act_layer * LAYERS / pp) * min(m, pp)
    memory = weights + acts
    oom = memory > HBM
    return Outcome(
        "oom" if oom else "ok",
        (pipe + grads * (1.05 if zero else 1.0)) * 1e9,
        int(memory),
        None,
        world_size=GPUS,
        reason="analytical memory exceeds 80 GiB" if oom else None,
    )
