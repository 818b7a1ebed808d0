"""A script written to train for 10,000 steps with an optimizer per parameter, each stepped by its gradient's
hook inside the backward (torchtune's `optimizer_in_bwd`), then zeroed there: no step outside the backward."""

import torch

model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(3))).cuda()
optimizers = {p: torch.optim.AdamW([p], fused=True) for p in model.parameters()}


def step(p: torch.Tensor) -> None:
    optimizers[p].step()
    optimizers[p].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(step)
x = torch.randn(32, 256, device="cuda")
for _ in range(10_000):
    model(x).square().mean().backward()
print("finished all steps")
