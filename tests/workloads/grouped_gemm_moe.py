"""A top-2 mixture-of-experts layer trained on grouped_gemm's ops, as nanotron's and Megatron's MoE layers call them.

A router picks each token's experts; the tokens are grouped by expert (the fork's `ops.permute`, or a sort and a
gather where the installed grouped_gemm lacks it), the experts' two GEMMs run as `ops.gmm` over the group sizes
(a host tensor), and the outputs are summed back per token (`ops.unpermute`, weighted by the router's
probabilities). Two training steps; prints the shapes, the group sizes and the gradients' shapes as JSON. Needs
grouped_gemm's Python code (`maya.installer.grouped_gemm`)."""

import json

import torch
from grouped_gemm import ops

TOKENS, HIDDEN, FFN, EXPERTS, TOP_K = 512, 256, 512, 4, 2
bf16 = {"device": "cuda", "dtype": torch.bfloat16}
router = torch.nn.Linear(HIDDEN, EXPERTS, device="cuda")
w1 = torch.nn.Parameter(torch.randn(EXPERTS, HIDDEN, FFN, **bf16) * 0.02)
w2 = torch.nn.Parameter(torch.randn(EXPERTS, FFN, HIDDEN, **bf16) * 0.02)
opt = torch.optim.AdamW([*router.parameters(), w1, w2], fused=True)
x = torch.randn(TOKENS, HIDDEN, **bf16)
fork = hasattr(ops, "permute")

for _ in range(2):
    probs, chosen = torch.topk(torch.softmax(router(x.float()), dim=-1), TOP_K)
    sizes = torch.bincount(chosen.flatten(), minlength=EXPERTS).cpu()
    if fork:
        grouped, row_map = ops.permute(x, chosen.int())
    else:
        order = torch.sort(chosen.flatten(), stable=True).indices
        grouped = x.index_select(0, order // TOP_K)
    hidden = ops.gmm(torch.nn.functional.gelu(ops.gmm(grouped, w1, sizes)), w2, sizes)
    if fork:
        out = ops.unpermute(hidden, row_map, probs)
    else:
        back = torch.empty_like(hidden).index_copy_(0, order, hidden).view(TOKENS, TOP_K, HIDDEN)
        out = (back * probs.unsqueeze(-1).to(back.dtype)).sum(1)
    out.float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
print(
    json.dumps(
        {
            "fork": fork,
            "sizes": sizes.tolist(),
            "hidden": list(hidden.shape),
            "out": list(out.shape),
            "grads": [list(p.grad.shape) for p in (w1, w2, router.weight)],
        }
    )
)
