"""MPT pretraining as MosaicML's llm-foundry + Composer ran it for the throughput tables of
`scripts/train/benchmarking/README.md` (`/work/shared/datasets/published/llm_foundry_mpt.csv`):
plain PyTorch, FSDP1, launched like torchrun (one process per GPU, `RANK`/`WORLD_SIZE`/`LOCAL_RANK`),
random tokens. No Maya imports; `README.md` lists every difference from the published stack.

    torchrun --nproc-per-node 8 mpt.py --model 1b --seq-len 2048 --micro-batch 14 --grad-accum 1 \
        --precision amp_bf16 --mp-mode DEFAULT --sharding FULL_SHARD
    python mpt.py --model 7b --seq-len 2048 --print-params   # parameters of the model as built, then exit

Model (llm-foundry `MPTForCausalLM` with the yamls' sizes and its defaults): learned positional
embeddings, biases on every linear layer, low-precision LayerNorm (computed in the autocast dtype),
fused QKV projection, GELU (exact) MLP of 4·d_model, embedding tied to the output projection (the
embedding module is called a second time to unembed), no dropout, vocabulary 50368; positions per sequence
from the batch's attention mask (`[b, s]` rows, so the position embedding's backward covers every token).
Training (Composer's per-step work): the batch (tokens, labels, the collator's all-ones attention mask) copied to
the GPU, gradients set to None, per micro-batch a copy of it, the forward under the precision's context (bf16
autocast, or for `amp_fp8` Transformer Engine's fp8 autocast), flash-attn's fused cross-entropy on the bf16 logits
(llm-foundry's default `loss_fn`), the backward, the logits kept until the next forward returns (Composer's
`state.outputs`); the two training metrics (cross-entropy, perplexity: each a full cross-entropy of the logits under
that context, no grad); gradient clipping at norm 1 (FSDP's `clip_grad_norm_`); Composer's DecoupledAdamW (or
DecoupledLionW), one parameter at a time with its step counter read back; then the loss and the step's timing
all-reduced and the metrics gathered across ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # d_model, n_heads, n_layers of scripts/train/yamls/pretrain/mpt-<size>.yaml
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}
VOCAB = 50368
EXPANSION = 4
PRECISIONS = ("amp_bf16", "bf16", "amp_fp8")
MP_MODES = ("DEFAULT", "PURE", "FULL")
SHARDINGS = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")
SDPA_BACKENDS = ("auto", "flash", "cudnn", "efficient", "math")
TRITON_ATTENTION_RANGE = "llmfoundry::triton_flash_attn"
"""A `record_function` range around the attention of `attn_impl: triton`: llm-foundry's Triton flash attention
(Tri Dao's `flash_attn_triton.py` on pre-MLIR Triton), which the simulator prices from its nearest measured
proxy (`maya.simulator.attention_shapes.TRITON_ATTENTION_RANGE`)."""
PACKAGE_ATTENTION_RANGE = "llmfoundry::flash_attn"
"""A `record_function` range around the attention of `attn_impl: flash`: flash-attn 2's kernels where the rows were
measured, for which torch's port of them (SDPA's flash backend) stands in here, priced as the package's
(`maya.simulator.attention_shapes.PACKAGE_ATTENTION_RANGES`)."""
IGNORE_INDEX = -100
LOSS_FNS = ("fused_crossentropy", "torch_crossentropy")


@dataclass(frozen=True)
class MPTConfig:
    d_model: int
    n_heads: int
    n_layers: int
    max_seq_len: int
    vocab_size: int = VOCAB
    expansion_ratio: int = EXPANSION

    @classmethod
    def of(cls, size: str, seq_len: int, **overrides: int) -> MPTConfig:
        if size not in SIZES:
            raise ValueError(f"unknown MPT size {size!r}; known: {', '.join(SIZES)}")
        d, h, n = SIZES[size]
        dims = {"d_model": d, "n_heads": h, "n_layers": n, **{k: v for k, v in overrides.items() if v is not None}}
        return cls(max_seq_len=seq_len, **dims)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    def num_params(self) -> int:
        """Closed form: token and position embeddings, per block two LayerNorms, QKV, output and MLP
        projections with their biases, the final LayerNorm."""
        d, e = self.d_model, self.expansion_ratio
        block = (4 + 2 * e) * d * d + (9 + e) * d
        return (self.vocab_size + self.max_seq_len) * d + self.n_layers * block + 2 * d


# ---- model ---------------------------------------------------------------------------------------


class LowPrecisionLayerNorm(nn.LayerNorm):
    """LayerNorm run in the autocast dtype (llm-foundry's `low_precision_layernorm`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kind = x.device.type
        if torch.is_autocast_enabled(kind):
            dtype = torch.get_autocast_dtype(kind)
            x, weight, bias = x.to(dtype), self.weight.to(dtype), self.bias.to(dtype)
        else:
            weight, bias = self.weight, self.bias
        with torch.autocast(kind, enabled=False):
            return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class SharedEmbedding(nn.Embedding):
    """Token embedding that also unembeds (`unembed=True`: hidden states @ weight^T)."""

    def forward(self, x: torch.Tensor, unembed: bool = False) -> torch.Tensor:
        return F.linear(x, self.weight) if unembed else super().forward(x)


def _linear_class(fp8: bool):
    """`nn.Linear`, or for fp8 (llm-foundry's `fc_type: te`) Transformer Engine's `te.Linear` on the device the model
    is built on: llm-foundry gives TE's layers no device (TE's default is the GPU) but builds the model inside
    accelerate's `init_empty_weights`, which moves every parameter registered to the meta device, so FSDP
    materialises them unit by unit like the others (TE defers its own initialisation only for the device named
    by the string "meta")."""
    if not fp8:
        return nn.Linear
    import transformer_engine.pytorch as te  # checked by require_fp8() before any model is built

    return partial(te.Linear, device=str(torch.get_default_device()))


class _GatherRows(torch.autograd.Function):
    """rows of a [n, d] tensor at `index` ([m, d], expanded); backward scatters into zeros."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return torch.gather(x, 0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        out = torch.zeros((ctx.rows, grad.shape[1]), device=grad.device, dtype=grad.dtype)
        return out.scatter_(0, index, grad), None


class _PutRows(torch.autograd.Function):
    """`x` written into rows `indices` of a zero [rows, d] tensor; backward reads those rows back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, indices: torch.Tensor, rows: int) -> torch.Tensor:
        ctx.save_for_backward(indices)
        out = torch.zeros((rows, x.shape[1]), device=x.device, dtype=x.dtype)
        out[indices] = x
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (indices,) = ctx.saved_tensors
        return grad[indices], None, None


def _unpad(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """flash-attn's `unpad_input` on an all-ones mask: per-sequence lengths, the kept tokens' indices
    (whose count the host reads back), the longest sequence read back, cumulative lengths, then the kept
    rows gathered. The indices are an `arange` of the count a `nonzero` would give: the mask is all ones,
    and under an emulator a `nonzero`'s size would follow stand-in values."""
    b, s = mask.shape
    lengths = mask.sum(dim=-1, dtype=torch.int32)
    torch.count_nonzero(mask).item()  # nonzero's device-to-host read of its size
    indices = torch.arange(b * s, device=x.device)
    lengths.max().item()  # max_seqlen_in_batch
    F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))  # cu_seqlens
    flat = x.reshape(b * s, -1)
    return _GatherRows.apply(flat, indices[:, None].expand(-1, flat.shape[1])), indices


class Attention(nn.Module):
    def __init__(self, cfg: MPTConfig, attn_impl: str, sdpa_backend: str, fp8: bool):
        super().__init__()
        self.d, self.heads = cfg.d_model, cfg.n_heads
        self.attn_impl, self.sdpa_backend = attn_impl, sdpa_backend
        linear = _linear_class(fp8)
        self.Wqkv = linear(cfg.d_model, 3 * cfg.d_model, bias=True)
        self.out_proj = linear(cfg.d_model, cfg.d_model, bias=True)
        self.out_proj._is_residual = True

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """[b, s, h, dh] in, [b, s, h, dh] out: causal, scale 1/sqrt(dh)."""
        with sdpa_context(self.sdpa_backend):
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                is_causal=True,
                scale=1.0 / math.sqrt(q.shape[-1]),
            )
        return o.transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.Wqkv(x).split(d, dim=2)
        shape = (b, s, self.heads, d // self.heads)
        if self.attn_impl == "triton":  # the fused kernel reads the strided q, k, v of the QKV output
            # the range tells the simulator which kernel the published runs used (SDPA's kernels stand in for it)
            with torch.profiler.record_function(TRITON_ATTENTION_RANGE):
                out = self._sdpa(q.view(shape), k.view(shape), v.view(shape)).reshape(b, s, d)
        else:  # "flash": flash-attn 2's variable-length path (unpad q, k, v by the mask; attend; pad the output)
            (q, indices), (k, _), (v, _) = _unpad(q, mask), _unpad(k, mask), _unpad(v, mask)
            with torch.profiler.record_function(PACKAGE_ATTENTION_RANGE):  # the package's kernels, as measured
                o = self._sdpa(q.view(shape), k.view(shape), v.view(shape)).reshape(b * s, d)
            out = _PutRows.apply(o, indices, b * s).view(b, s, d)
        return self.out_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: MPTConfig, fp8: bool):
        super().__init__()
        linear = _linear_class(fp8)
        self.up_proj = linear(cfg.d_model, cfg.expansion_ratio * cfg.d_model, bias=True)
        self.act = nn.GELU(approximate="none")
        self.down_proj = linear(cfg.expansion_ratio * cfg.d_model, cfg.d_model, bias=True)
        self.down_proj._is_residual = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


class MPTBlock(nn.Module):
    def __init__(self, cfg: MPTConfig, attn_impl: str, sdpa_backend: str, fp8: bool):
        super().__init__()
        self.norm_1 = LowPrecisionLayerNorm(cfg.d_model)
        self.attn = Attention(cfg, attn_impl, sdpa_backend, fp8)
        self.norm_2 = LowPrecisionLayerNorm(cfg.d_model)
        self.ffn = MLP(cfg, fp8)
        self.resid_attn_dropout = nn.Dropout(0.0)
        self.resid_ffn_dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.resid_attn_dropout(self.attn(self.norm_1(x), mask))
        return x + self.resid_ffn_dropout(self.ffn(self.norm_2(x)))


class MPTModel(nn.Module):
    def __init__(self, cfg: MPTConfig, attn_impl: str = "triton", sdpa_backend: str = "auto", fp8: bool = False):
        super().__init__()
        self.wte = SharedEmbedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.emb_drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList(MPTBlock(cfg, attn_impl, sdpa_backend, fp8) for _ in range(cfg.n_layers))
        self.norm_f = LowPrecisionLayerNorm(cfg.d_model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states; positions count only the unmasked tokens before each one (llm-foundry shifts them
        past left padding whenever the batch has an attention mask, as its collators' batches do)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.bool()
        pos = torch.arange(input_ids.shape[1], dtype=torch.long, device=input_ids.device).unsqueeze(0)
        pos = torch.clamp(pos - torch.cumsum((~mask).to(torch.int32), dim=1), min=0)  # [b, s]: one row per sequence
        x = self.emb_drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.blocks:
            x = block(x, mask)
        return self.norm_f(x)


class MPTForCausalLM(nn.Module):
    def __init__(self, cfg: MPTConfig, attn_impl: str = "triton", sdpa_backend: str = "auto", fp8: bool = False):
        super().__init__()
        if attn_impl not in ("triton", "flash"):
            raise ValueError(f"attn_impl must be 'triton' or 'flash', not {attn_impl!r}")
        self.cfg = cfg
        self.transformer = MPTModel(cfg, attn_impl, sdpa_backend, fp8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.transformer.wte(self.transformer(input_ids, attention_mask), True)  # logits, tied to the embedding

    def fsdp_units(self) -> set[nn.Module]:
        """Modules llm-foundry makes FSDP units: every block and every other child of the transformer."""
        t = self.transformer
        return {t.wte, t.wpe, t.emb_drop, t.norm_f, *t.blocks}


def init_params(module: nn.Module, n_layers: int) -> None:
    """llm-foundry's default init of one module's own tensors: kaiming-normal (fan-in, ReLU gain)
    weights, residual projections divided by sqrt(2·n_layers), zero biases, unit LayerNorms."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(weight)
    elif isinstance(weight, torch.Tensor) and weight.dim() == 2:
        nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="relu")
        if getattr(module, "_is_residual", False):
            with torch.no_grad():
                weight.div_(math.sqrt(2 * n_layers))
    if isinstance(bias, torch.Tensor):
        nn.init.zeros_(bias)


# ---- precision, attention backend ----------------------------------------------------------------


def require_fp8() -> None:
    """`amp_fp8` runs the projections as Transformer Engine fp8 GEMMs: fail clearly without it."""
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as e:  # TE's import also fails by OSError (a library), AssertionError (versions), RuntimeError
        sys.exit(
            f"error: --precision amp_fp8 needs NVIDIA Transformer Engine (import transformer_engine.pytorch "
            f"failed: {type(e).__name__}: {e}); install Transformer Engine for PyTorch (Maya's setup: "
            f"MAYA_WITH_TE=1 scripts/setup), or use amp_bf16 or bf16"
        )
    if torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9):
        sys.exit(
            f"error: --precision amp_fp8 needs a GPU with fp8 tensor cores (sm_89 or newer); this one is "
            f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
        )


def precision_context(precision: str):
    """Composer's precision context: bf16 autocast (`amp_bf16`, and `bf16` as Composer <= 0.11 named it),
    or Transformer Engine's fp8 autocast with Composer's recipe (HYBRID, amax history 16, max)."""
    if precision == "amp_fp8":
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format

        recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
        return te.fp8_autocast(enabled=True, fp8_recipe=recipe)
    return torch.autocast("cuda", dtype=torch.bfloat16)


def sdpa_context(backend: str):
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        {
            "flash": SDPBackend.FLASH_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH,
        }[backend]
    )


# ---- optimizers (Composer's decoupled AdamW / LionW: a Python loop over the parameters) ------------


class DecoupledAdamW(torch.optim.Optimizer):
    """AdamW with weight decay scaled by lr / initial lr; a device step counter per parameter, read back
    once per parameter and step (as Composer's implementation does)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "initial_lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    state["steps"] = 0
                state["step"] += 1
                state["step"].item()  # Composer reads the device counter back (a host sync per parameter) ...
                state["steps"] += 1
                step = state["steps"]  # ... and uses its value, which is this count
                if wd:
                    p.mul_(1 - lr / group["initial_lr"] * wd)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
                p.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))


class DecoupledLionW(torch.optim.Optimizer):
    """Lion with decoupled weight decay: sign of the interpolated momentum, then the momentum update."""

    def __init__(self, params, lr: float, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay, "initial_lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                if wd:
                    p.mul_(1 - lr / group["initial_lr"] * wd)
                exp_avg = state["exp_avg"]
                p.add_(exp_avg.lerp(p.grad, 1 - beta1).sign_(), alpha=-lr)
                exp_avg.lerp_(p.grad, 1 - beta2)


# ---- command line ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, choices=SIZES, help="MPT size (the table's Model)")
    p.add_argument("--seq-len", type=int, required=True, help="sequence length (SeqLen (T))")
    p.add_argument("--micro-batch", type=int, help="sequences per GPU per micro-batch (MicroBatchSize)")
    p.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step (GradAccum)")
    p.add_argument(
        "--global-batch",
        type=int,
        help="sequences per optimizer step, all GPUs (GlobalBatchSize); with --micro-batch alone the\n"
        "last micro-batch may be smaller, as Composer splits",
    )
    p.add_argument("--precision", default="amp_bf16", choices=PRECISIONS, help="Precision (default amp_bf16)")
    p.add_argument(
        "--mp-mode",
        default="DEFAULT",
        choices=MP_MODES,
        help="FSDP mixed precision (MP Mode): DEFAULT = bf16 params, fp32 gradient reduction;\n"
        "PURE = bf16 params and reduction; FULL = fp32 (default DEFAULT)",
    )
    p.add_argument("--sharding", default="FULL_SHARD", choices=SHARDINGS, help="Sharding Strategy")
    p.add_argument(
        "--activation-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="non-reentrant checkpointing of every block (Activation Checkpointing)",
    )
    p.add_argument(
        "--activation-cpu-offload",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Activation CPUOffload (not supported: every published row has it off)",
    )
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (default 3)")
    p.add_argument(
        "--attn-impl",
        default="triton",
        choices=("triton", "flash"),
        help="llm-foundry's attention path: triton (fused kernel on the strided QKV views) or flash\n"
        "(flash-attn 2's unpad / pad around the kernel); the kernel is torch's SDPA",
    )
    p.add_argument(
        "--sdpa-backend", default="auto", choices=SDPA_BACKENDS, help="SDPA backend: auto = torch's choice (default)"
    )
    p.add_argument(
        "--backward-prefetch",
        default="BACKWARD_POST",
        choices=PREFETCH,
        help="FSDP backward prefetch (Composer's default BACKWARD_POST)",
    )
    p.add_argument("--forward-prefetch", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--limit-all-gathers", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--use-orig-params",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="FSDP use_orig_params (Composer >= 0.16: on; torch 1.13 had flat parameters only)",
    )
    p.add_argument(
        "--loss-fn",
        default="fused_crossentropy",
        choices=LOSS_FNS,
        help="llm-foundry's loss_fn: fused_crossentropy (its default: flash-attn's fused kernel, which "
        "keeps no log-probabilities) or torch_crossentropy",
    )
    p.add_argument("--optimizer", default="decoupled_adamw", choices=("decoupled_adamw", "decoupled_lionw"))
    p.add_argument("--lr", type=float, default=2.0e-4)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip-norm", type=float, default=1.0, help="gradient clipping norm; 0: none (default 1.0)")
    p.add_argument(
        "--train-metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Composer's per-micro-batch training metrics (cross-entropy and perplexity)",
    )
    p.add_argument("--layers", type=int, help="override the size's n_layers (small test runs)")
    p.add_argument("--d-model", type=int, help="override the size's d_model")
    p.add_argument("--heads", type=int, help="override the size's n_heads")
    p.add_argument("--vocab", type=int, default=VOCAB, help=f"vocabulary (default {VOCAB})")
    p.add_argument("--print-params", action="store_true", help="print the parameter count and exit")
    args = p.parse_args(argv)
    for name in (
        "seq_len",
        "micro_batch",
        "grad_accum",
        "global_batch",
        "steps",
        "layers",
        "d_model",
        "heads",
        "vocab",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, not {value}")
    if args.activation_cpu_offload:
        p.error("--activation-cpu-offload is not supported (every published row ran without it)")
    if not args.print_params and args.micro_batch is None:
        p.error("--micro-batch is required")
    if args.global_batch is None and args.grad_accum is None and not args.print_params:
        p.error("give --grad-accum or --global-batch")
    return args


def micro_batches(args: argparse.Namespace, world: int) -> list[int]:
    """Sizes of this rank's micro-batches in one optimizer step (Composer: the per-rank batch cut into
    micro-batches of `--micro-batch`, the last one possibly smaller)."""
    mbs = args.micro_batch
    if args.global_batch is None:
        return [mbs] * args.grad_accum
    if args.global_batch % world:
        raise SystemExit(f"error: --global-batch {args.global_batch} is not divisible by the {world} ranks")
    per_rank = args.global_batch // world
    sizes = [mbs] * (per_rank // mbs) + ([per_rank % mbs] if per_rank % mbs else [])
    if args.grad_accum is not None and args.grad_accum != len(sizes):
        raise SystemExit(
            f"error: --global-batch {args.global_batch} on {world} ranks with --micro-batch {mbs} makes "
            f"{len(sizes)} micro-batches per step, not --grad-accum {args.grad_accum}"
        )
    return sizes


def count_params(cfg: MPTConfig) -> int:
    """Parameters of the model as built (on the meta device: no memory, no GPU)."""
    with torch.device("meta"):
        return sum(p.numel() for p in MPTForCausalLM(cfg).parameters())


def model_config(args: argparse.Namespace) -> MPTConfig:
    return MPTConfig.of(
        args.model, args.seq_len, n_layers=args.layers, d_model=args.d_model, n_heads=args.heads, vocab_size=args.vocab
    )


# ---- FSDP -----------------------------------------------------------------------------------------


def mixed_precision(precision: str, mode: str):
    """Composer's FSDP MixedPrecision for a precision and MP mode (fp8 keeps bf16 parameters)."""
    from torch.distributed.fsdp import MixedPrecision

    if mode == "FULL":
        return MixedPrecision()
    low = torch.bfloat16
    return MixedPrecision(param_dtype=low, reduce_dtype=torch.float32 if mode == "DEFAULT" else low, buffer_dtype=low)


def shard(model: MPTForCausalLM, args: argparse.Namespace) -> nn.Module:
    """FSDP1 as Composer wraps llm-foundry's model: one unit per block and per other child of the
    transformer, the model itself the root; parameters built on the meta device and materialised unit
    by unit; then non-reentrant activation checkpointing of every block (`checkpoint_kwargs`)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import CustomPolicy

    units = model.fsdp_units()
    device = torch.device("cuda", torch.cuda.current_device())

    def materialise(module: nn.Module) -> None:
        if any(t.is_meta for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]):
            module.to_empty(device=device, recurse=False)
            init_params(module, model.cfg.n_layers)

    prefetch = None if args.backward_prefetch == "NONE" else BackwardPrefetch[args.backward_prefetch]
    wrapped = FSDP(
        model,
        sharding_strategy=ShardingStrategy[args.sharding],
        auto_wrap_policy=CustomPolicy(lambda m: m in units),
        mixed_precision=mixed_precision(args.precision, args.mp_mode),
        backward_prefetch=prefetch,
        param_init_fn=materialise,
        device_id=device,
        sync_module_states=False,
        forward_prefetch=args.forward_prefetch,
        limit_all_gathers=args.limit_all_gathers,
        use_orig_params=args.use_orig_params,
    )
    if args.activation_checkpointing:
        apply_activation_checkpointing(
            wrapped,
            checkpoint_wrapper_fn=partial(checkpoint_wrapper, **checkpoint_kwargs(args.precision)),
            check_fn=lambda m: isinstance(m, MPTBlock),
        )
    return wrapped


def checkpoint_kwargs(precision: str) -> dict[str, object]:
    """How each block is checkpointed: torch's non-reentrant checkpoint, or for `amp_fp8` Transformer Engine's
    (Composer's `te_checkpoint_wrapper`, which fp8 needs): the backward runs outside `te.fp8_autocast`, and TE's
    checkpoint recomputes the block under the fp8 recipe of its forward, so its layers save the same tensors.
    Composer's RNG-state tracker is left out: no MPT layer draws random numbers."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl

    if precision != "amp_fp8":
        return {"checkpoint_impl": CheckpointImpl.NO_REENTRANT}
    import transformer_engine.pytorch as te

    return {"checkpoint_fn": te.distributed.checkpoint, "use_reentrant": False}


# ---- loss (llm-foundry's `loss_fn`) -------------------------------------------------------------------

CE_CHUNK_BYTES = 1 << 28
"""Row chunks of the fused cross-entropy's logits: a chunk's softmax is its only temporary."""


def _row_chunks(logits: torch.Tensor) -> list[slice]:
    rows = max(1, CE_CHUNK_BYTES // max(1, logits.shape[1] * logits.element_size()))
    return [slice(i, min(i + rows, logits.shape[0])) for i in range(0, logits.shape[0], rows)]


class FusedCrossEntropy(torch.autograd.Function):
    """flash-attn's fused cross-entropy (`flash_attn.losses.cross_entropy.CrossEntropyLoss`, llm-foundry's
    default `loss_fn: fused_crossentropy` since March 2023) as its memory behaves: per-token fp32 losses of
    the logits as they are (no fp32 copy, no log-probabilities kept), the logits themselves saved for
    backward, which writes the gradient into one new logits-sized tensor (`inplace_backward` off, as
    llm-foundry builds it). The kernel holds a row in registers; here torch ops run over row chunks of at
    most `CE_CHUNK_BYTES`, whose softmax is the only temporary. Ignored targets get loss and gradient 0."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
        losses = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        index = target.clamp(min=0)[:, None]  # ignored rows read entry 0; their loss is zeroed below
        with torch.autocast(logits.device.type, enabled=False):  # the kernel reads the logits' own dtype
            for rows in _row_chunks(logits):
                log_probs = torch.log_softmax(logits[rows], dim=-1)
                losses[rows] = log_probs.gather(1, index[rows]).squeeze(1).neg()
        losses.masked_fill_(target == ignore_index, 0.0)
        ctx.save_for_backward(logits, target)
        ctx.ignore_index = ignore_index
        return losses

    @staticmethod
    def backward(ctx, grad_losses: torch.Tensor):
        logits, target = ctx.saved_tensors
        scale = grad_losses.masked_fill(target == ctx.ignore_index, 0.0).to(logits.dtype)[:, None]
        index = target.clamp(min=0)[:, None]
        grad = torch.empty_like(logits)
        with torch.autocast(logits.device.type, enabled=False):
            for rows in _row_chunks(logits):
                part = grad[rows]
                torch.softmax(logits[rows], dim=-1, out=part)  # d loss / d logits = softmax - one-hot
                part.scatter_add_(1, index[rows], torch.full_like(index[rows], -1, dtype=part.dtype))
                part.mul_(scale[rows])
        return grad, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, loss_fn: str) -> torch.Tensor:
    """Mean cross-entropy over the non-ignored targets: `loss_fn` as llm-foundry's (`fused_crossentropy`:
    flash-attn's, its losses summed over the count of scored tokens; `torch_crossentropy`: torch's, which
    keeps the log-probabilities for backward)."""
    if loss_fn == "torch_crossentropy":
        return F.cross_entropy(logits, target, ignore_index=IGNORE_INDEX)
    return FusedCrossEntropy.apply(logits, target, IGNORE_INDEX).sum() / (target != IGNORE_INDEX).sum()


# ---- training -------------------------------------------------------------------------------------


def targets_of(labels: torch.Tensor) -> torch.Tensor:
    """Next-token targets: labels shifted left, the last position ignored."""
    targets = torch.roll(labels, shifts=-1)
    targets[:, -1] = IGNORE_INDEX
    return targets


def update_metrics(logits: torch.Tensor, labels: torch.Tensor, states: list[torch.Tensor], precision: str) -> None:
    """Composer's training metrics on one micro-batch: labels shifted, then per metric (cross-entropy,
    perplexity) a summed cross-entropy of the logits and the count of scored tokens, under the precision's
    context as Composer updates them (bf16 autocast, which computes the cross-entropy in fp32; under `amp_fp8`
    TE's fp8 autocast, no torch autocast: the cross-entropy runs in the logits' bf16)."""
    with torch.no_grad(), precision_context(precision):
        labels[:, :-1] = labels[:, 1:].clone()
        labels[:, -1] = IGNORE_INDEX
        target = labels.view(-1)
        for i in range(0, len(states), 2):
            states[i] += F.cross_entropy(
                logits.view(target.shape[0], -1), target, ignore_index=IGNORE_INDEX, reduction="sum"
            )
            states[i + 1] += (target != IGNORE_INDEX).sum()


def end_of_batch(
    loss: torch.Tensor, states: list[torch.Tensor], samples: int, tokens: int, seconds: float, world: int
) -> float:
    """What Composer does after the optimizer step: the loss all-reduced and read back, samples, tokens
    and time all-reduced and read back, each metric state gathered across ranks and the metrics read."""
    dist.all_reduce(loss)
    value = loss.cpu().item() / world
    counts = torch.tensor([samples, tokens], dtype=torch.int, device="cuda")
    dist.all_reduce(counts)
    elapsed = torch.tensor([seconds], dtype=torch.float32, device="cuda")
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    elapsed[0].cpu().item(), counts[0].cpu().item(), counts[1].cpu().item()
    gathered = []
    for state in states:  # torchmetrics' gather of a scalar state: one all-gather, then the sum
        parts = torch.empty(world, dtype=state.dtype, device=state.device)
        dist.all_gather_into_tensor(parts, state.reshape(1))
        gathered.append(parts.sum(dim=0))
    for i in range(0, len(gathered), 2):
        mean = gathered[i] / gathered[i + 1]
        (mean if i == 0 else torch.exp(mean)).item()
    return value


def train(args: argparse.Namespace) -> None:
    if not torch.cuda.is_available():
        sys.exit("error: this workload needs CUDA GPUs (run it under torchrun on GPUs, or under `maya emulate`)")
    if args.precision == "amp_fp8":
        require_fp8()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(17)
    sizes = micro_batches(args, world)
    cfg = model_config(args)
    with torch.device("meta"):
        model = MPTForCausalLM(cfg, args.attn_impl, args.sdpa_backend, fp8=args.precision == "amp_fp8")
    if rank == 0:
        print(
            f"MPT-{args.model}: {cfg.num_params():,} parameters; {world} ranks, micro-batches {sizes} of "
            f"{args.seq_len} tokens per step, {args.precision}/{args.mp_mode}, {args.sharding}, activation "
            f"checkpointing {'on' if args.activation_checkpointing else 'off'}",
            flush=True,
        )
    model = shard(model, args)
    opt_class = DecoupledAdamW if args.optimizer == "decoupled_adamw" else DecoupledLionW
    opt = opt_class(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    per_rank = sum(sizes)
    last = time.time()
    for step in range(args.steps):
        host = {"input_ids": torch.randint(0, cfg.vocab_size, (per_rank, args.seq_len)).pin_memory()}
        host["labels"] = host["input_ids"].clone().pin_memory()
        host["attention_mask"] = torch.ones_like(host["input_ids"]).pin_memory()  # the collator's, all ones
        batch = {k: v.to("cuda", non_blocking=True) for k, v in host.items()}
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(1, device="cuda")
        states = [
            torch.zeros((), device="cuda"),
            torch.zeros((), dtype=torch.long, device="cuda"),
            torch.zeros((), device="cuda"),
            torch.zeros((), dtype=torch.long, device="cuda"),
        ]
        start = 0
        for size in sizes:
            micro = {k: v[start : start + size] for k, v in batch.items()}
            start += size
            copy = {k: v.clone() for k, v in micro.items()}  # Composer's deepcopy of the micro-batch
            with precision_context(args.precision):
                logits = model(micro["input_ids"], micro["attention_mask"])
            loss = cross_entropy(logits.view(-1, logits.shape[-1]), targets_of(micro["labels"]).view(-1), args.loss_fn)
            micro_loss = torch.zeros(1, device="cuda").add_(loss.mean())
            total += micro_loss.detach().clone().mean() * (size / per_rank)
            micro_loss.mul_(size / per_rank)
            micro_loss.backward()
            if args.train_metrics:
                update_metrics(logits.detach(), copy["labels"], states, args.precision)
            del loss, micro_loss  # the logits stay until the next forward returns (Composer's state.outputs)
        if args.clip_norm:
            model.clip_grad_norm_(args.clip_norm)
        opt.step()
        now = time.time()
        value = end_of_batch(total, states, per_rank, per_rank * args.seq_len, now - last, world)
        last = now
        if rank == 0:
            print(f"step {step}: loss {value:.3f}", flush=True)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.print_params:
        print(count_params(model_config(args)))
        return
    train(args)


if __name__ == "__main__":
    main()
