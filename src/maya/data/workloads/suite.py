"""The ground-truth suite: the reference workloads (gpt.py, llama.py) over sizes, sequence lengths,
micro-batches, bf16 autocast or fp32, with or without activation checkpointing, on one 80 GB GPU.

`CONFIGS` is the suite (see maya/profiler/workloads/suite.py for the format). Each config carries
rough analytic estimates, recorded with its results: `estimate_gib`, the allocator's peak (AdamW
training state plus saved activations plus logits), and `estimate_s`, the whole config on an H100
(process start, CUDA initialisation, trace export and import, plus 20 iteration-times: 5 warm-up,
10 measured, 3 profiled and the profiler's slowdown). `expect` is "oom" where the estimate is over
the H100's 80 GB; every such config stops at its out-of-memory error after about two iterations.
Nothing here is measured: the results are the truth, the estimates only chose the configs.
"""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from gpt import SIZES as GPT_SIZES  # noqa: E402
from gpt import VOCAB as GPT_VOCAB  # noqa: E402
from llama import SIZES as LLAMA_SIZES  # noqa: E402

H100_GIB = 79.6  # 81559 MiB
BF16_FLOPS = 250e12  # sustained training rates assumed on an H100: dense bf16 ...
FP32_FLOPS = 40e12  # ... and fp32 without TF32 (PyTorch's default for matrix products)
OVERHEAD_S = 8.0
OVERHEAD_PER_LAYER_S = 0.25  # trace export and conversion grow with the number of ops
ITERATION_TIMES = 20
OOM_ITERATION_TIMES = 2


def dimensions(arch: str, size: str) -> dict:
    """layers, dim, ffn, kv_dim, vocab, tied, and `mlp_saved`: the ffn-wide tensors that autograd
    saves per layer (GELU: its input and output; SwiGLU: gate, SiLU, up and their product)."""
    if arch == "gpt":
        layers, dim, _ = GPT_SIZES[size]
        return dict(layers=layers, dim=dim, ffn=4 * dim, kv_dim=dim, vocab=GPT_VOCAB, tied=True, mlp_saved=2)
    layers, dim, heads, kv_heads, ffn, vocab, tied = LLAMA_SIZES[size]
    return dict(layers=layers, dim=dim, ffn=ffn, kv_dim=kv_heads * dim // heads, vocab=vocab, tied=tied, mlp_saved=4)


def parameter_count(arch: str, size: str, seq: int) -> int:
    d = dimensions(arch, size)
    h, f, kv, L = d["dim"], d["ffn"], d["kv_dim"], d["layers"]
    embeddings = d["vocab"] * h * (1 if d["tied"] else 2)
    if arch == "gpt":  # learned positions; qkv, proj, fc1, fc2 with biases; two LayerNorms per block
        return embeddings + seq * h + L * (12 * h * h + 13 * h) + 2 * h
    return embeddings + L * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + h  # no biases; RMSNorm


def peak_bytes(arch: str, size: str, seq: int, batch: int, bf16: bool, checkpoint: bool) -> int:
    """fp32 weights, gradients and AdamW moments (16 B per parameter), and what autograd saves: per
    token and layer the fp32 inputs of the two norms (8·dim B) and, in the compute dtype, the inputs
    of the attention and MLP input projections and of the output projection (3·dim), attention's q,
    k, v and output (4·dim, keys and values repeated to every head) and the MLP's ffn-wide tensors;
    with checkpointing only each block's input plus one block's activations; and the logits (compute
    dtype, fp32 copy, log-softmax, gradients: 16 B per token and vocabulary entry)."""
    d = dimensions(arch, size)
    h, f, L = d["dim"], d["ffn"], d["layers"]
    c = 2 if bf16 else 4
    per_layer = 8 * h + c * (7 * h + d["mlp_saved"] * f)
    tokens = seq * batch
    activations = tokens * ((L * 4 * h + per_layer) if checkpoint else L * per_layer)
    return 16 * parameter_count(arch, size, seq) + activations + 16 * tokens * d["vocab"]


def iteration_seconds(arch: str, size: str, seq: int, batch: int, bf16: bool, checkpoint: bool) -> float:
    """6 FLOPs per parameter and token, plus attention's 12·layers·seq·dim per token; checkpointing
    repeats the forward (4/3)."""
    d = dimensions(arch, size)
    tokens = seq * batch
    flops = 6 * parameter_count(arch, size, seq) * tokens + 12 * d["layers"] * seq * d["dim"] * tokens
    return flops * (4 / 3 if checkpoint else 1) / (BF16_FLOPS if bf16 else FP32_FLOPS)


def config(arch: str, size: str, seq: int, batch: int, dtype: str = "bf16", checkpoint: bool = False) -> dict:
    bf16 = dtype == "bf16"
    gib = peak_bytes(arch, size, seq, batch, bf16, checkpoint) / 2**30
    expect = "oom" if gib > H100_GIB else "ok"
    iterations = OOM_ITERATION_TIMES if expect == "oom" else ITERATION_TIMES
    seconds = (
        OVERHEAD_S
        + OVERHEAD_PER_LAYER_S * dimensions(arch, size)["layers"]
        + iterations * iteration_seconds(arch, size, seq, batch, bf16, checkpoint)
    )
    args = ["--size", size, "--seq", str(seq), "--batch", str(batch), "--steps", "100"]
    args += ["--bf16"] if bf16 else []
    args += ["--checkpoint"] if checkpoint else []
    return {
        "name": f"{arch}-{size}-s{seq}-b{batch}-{dtype}" + ("-ckpt" if checkpoint else ""),
        "script": f"{arch}.py",
        "args": args,
        "expect": expect,
        "estimate_gib": round(gib, 1),
        "estimate_s": round(seconds, 1),
    }


CONFIGS = [
    config("gpt", "125m", 1024, 1),
    config("gpt", "125m", 1024, 8),
    config("gpt", "125m", 1024, 16),
    config("gpt", "125m", 2048, 8),
    config("gpt", "125m", 4096, 2),
    config("gpt", "125m", 1024, 8, "fp32"),
    config("gpt", "350m", 1024, 8),
    config("gpt", "350m", 2048, 4),
    config("gpt", "350m", 4096, 1),
    config("gpt", "350m", 1024, 4, "fp32"),
    config("gpt", "350m", 2048, 8, checkpoint=True),
    config("gpt", "760m", 1024, 8),
    config("gpt", "760m", 2048, 4),
    config("gpt", "760m", 4096, 2),
    config("gpt", "760m", 2048, 8, checkpoint=True),
    config("gpt", "1.3b", 1024, 8),
    config("gpt", "1.3b", 2048, 4),
    config("gpt", "1.3b", 4096, 2),
    config("gpt", "1.3b", 1024, 8, checkpoint=True),
    config("gpt", "1.3b", 1024, 2, "fp32"),
    config("gpt", "2.7b", 1024, 4),
    config("gpt", "2.7b", 2048, 4),  # near the limit, estimated to fit
    config("gpt", "2.7b", 4096, 1),
    config("gpt", "2.7b", 1024, 4, checkpoint=True),
    config("gpt", "2.7b", 1024, 1, "fp32"),
    config("gpt", "2.7b", 2048, 8),  # out of memory: the activations of 16k tokens
    config("gpt", "2.7b", 2048, 4, "fp32"),  # out of memory, just: fp32 activations
    config("llama", "125m", 1024, 8),
    config("llama", "125m", 2048, 16, checkpoint=True),
    config("llama", "1b", 2048, 4),
    config("llama", "1b", 4096, 2),
    config("llama", "1b", 2048, 4, checkpoint=True),
    config("llama", "1b", 1024, 2, "fp32"),
    config("llama", "3b", 2048, 2),
    config("llama", "3b", 4096, 4, checkpoint=True),
]
