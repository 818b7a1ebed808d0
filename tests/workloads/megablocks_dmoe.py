"""MegaBlocks' dropless mixture of experts (`megablocks.layers.dmoe.dMoE`) trained for two steps, as llm-foundry's
`mb_dmoe` layer runs it: 4 experts, top-2, bf16, 2 x 256 tokens of width 256. `--impl grouped` runs the experts as
grouped_gemm's `gmm`; `--impl sparse` (MegaBlocks' default) as Stanford's block-sparse Triton kernels, which MegaBlocks
0.10 refuses with Triton 3.2 and later. Prints the
output's shape and the load-balancing loss's inputs as JSON. Needs MegaBlocks' Python code
(`maya.installer.megablocks`) and, for `grouped`, grouped_gemm's (`maya.installer.grouped_gemm`)."""

import argparse
import json

import torch
from megablocks.layers.arguments import Arguments
from megablocks.layers.dmoe import dMoE
from megablocks.layers.moe import batched_load_balancing_loss, clear_load_balancing_loss

parser = argparse.ArgumentParser()
parser.add_argument("--impl", choices=["grouped", "sparse"], default="grouped")
impl = parser.parse_args().impl
args = Arguments(
    hidden_size=256, ffn_hidden_size=512, moe_num_experts=4, moe_top_k=2, mlp_impl=impl, bf16=True, fp16=False,
    bias=False, return_bias=False,
)  # fmt: skip
layer = dMoE(args)
opt = torch.optim.AdamW(layer.parameters(), fused=True)
x = torch.randn(256, 2, 256, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    out = layer(x)
    loss = out.float().pow(2).mean() + batched_load_balancing_loss(args)
    loss.backward()
    clear_load_balancing_loss()
    opt.step()
    opt.zero_grad(set_to_none=False)
print(
    json.dumps(
        {"impl": impl, "out": list(out.shape), "experts": [list(p.shape) for p in layer.experts.mlp.parameters()]}
    )
)
