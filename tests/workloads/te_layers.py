"""Transformer Engine's PyTorch layers in bf16, as its quickstart trains them: `te.Linear`, `te.LayerNormLinear`,
`te.LayerNormMLP` and a `te.TransformerLayer`, forward + backward + an AdamW step for a few steps, wrapped in DDP
when launched with several ranks. `--fp8`: the same under `te.fp8_autocast` with delayed scaling.
Prints `te steps N` at the end."""

import argparse
import os

import torch
import transformer_engine.pytorch as te
from transformer_engine.common.recipe import DelayedScaling, Format

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--fp8", action="store_true")
args = parser.parse_args()

distributed = "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    torch.distributed.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
hidden, ffn, heads, seq, batch = 1024, 4096, 16, 512, 4


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        kw = {"params_dtype": torch.bfloat16}
        self.proj = te.Linear(hidden, hidden, **kw)
        self.ln_linear = te.LayerNormLinear(hidden, hidden, **kw)
        self.mlp = te.LayerNormMLP(hidden, ffn, **kw)
        self.block = te.TransformerLayer(hidden, ffn, heads, hidden_dropout=0.0, attention_dropout=0.0, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.mlp(self.ln_linear(self.proj(x))))


model = Model().cuda()
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
x = torch.randn(seq, batch, hidden, device="cuda", dtype=torch.bfloat16)
for _ in range(args.steps):
    with te.fp8_autocast(enabled=args.fp8, fp8_recipe=recipe):
        y = model(x)
    y.float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(f"te steps {args.steps}")
