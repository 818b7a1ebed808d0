"""An optimizer per parameter stepped inside the backward (torchtune's `optimizer_in_bwd`) with reentrant activation
checkpointing: each block's parameters step inside that block's own (inner) backward, run in the loss's."""

import torch
import torch.utils.checkpoint as checkpoint

blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh()) for _ in range(4)).cuda()
optimizers = {p: torch.optim.AdamW([p]) for p in blocks.parameters()}


def step(p: torch.Tensor) -> None:
    optimizers[p].step()
    optimizers[p].zero_grad()


for p in blocks.parameters():
    p.register_post_accumulate_grad_hook(step)
x = torch.randn(32, 256, device="cuda", requires_grad=True)
for _ in range(10_000):
    h = x
    for block in blocks:
        h = checkpoint.checkpoint(block, h, use_reentrant=True)
    h.square().mean().backward()
print("finished all steps")
