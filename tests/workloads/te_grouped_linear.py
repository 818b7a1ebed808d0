"""Transformer Engine's grouped linear layer (an MoE's experts as one grouped GEMM) in bf16: forward + backward + an
AdamW step for a few steps, the tokens split evenly over the experts. `te.GroupedLinear` (one cuBLASLt GEMM per
expert, on TE's side streams); `--ops`: the fusible operation `te.ops.GroupedLinear` (on Hopper with cuBLASLt 13.4
or newer one cuBLASLt grouped GEMM); `--fp8`: under `te.fp8_autocast` with delayed scaling.
Prints `te grouped steps N` at the end."""

import argparse

import torch
import transformer_engine.pytorch as te
from transformer_engine.common.recipe import DelayedScaling, Format

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--experts", type=int, default=4)
parser.add_argument("--ops", action="store_true")
parser.add_argument("--fp8", action="store_true")
args = parser.parse_args()

torch.cuda.set_device(0)
hidden, ffn, tokens = 1024, 2048, 4096
if args.ops:
    layer = te.ops.GroupedLinear(args.experts, hidden, ffn, device="cuda", dtype=torch.bfloat16)
else:
    layer = te.GroupedLinear(args.experts, hidden, ffn, params_dtype=torch.bfloat16).cuda()
opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
splits = [tokens // args.experts] * args.experts
split_sizes = torch.tensor(splits, device="cuda", dtype=torch.int64)
recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
for _ in range(args.steps):
    with te.fp8_autocast(enabled=args.fp8, fp8_recipe=recipe):
        y = layer(x, split_sizes) if args.ops else layer(x, splits)
    y.float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(f"te grouped steps {args.steps}")
