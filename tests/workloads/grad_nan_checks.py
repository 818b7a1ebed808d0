"""Megatron's gradient checks (`_ParamAndGradBuffer.check_grads`): each bucket's norm is asked `isnan`,
then `isinf`, bucket after bucket of the same size, every step; then a `clip_grad_norm_` that raises on a
non-finite total, an `isinf(bucket).any()` and an `isfinite` of the total. The values are only a GPU's, so
the answers are a healthy run's: the script checks that every answer within a step agrees."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(3))).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
buckets = [torch.zeros(64 * 64 + 64, device="cuda") for _ in model]  # one bucket per layer, equal sizes
for step in range(3):
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    for layer, bucket in zip(model, buckets, strict=True):
        torch.cat([p.grad.flatten() for p in layer.parameters()], out=bucket)
    for i, bucket in enumerate(buckets):
        norm = bucket.norm(p=2)
        assert not bool(torch.isnan(norm)), f"step {step}: NaN in bucket {i}'s norm"
        assert not bool(torch.isinf(norm)), f"step {step}: Inf in bucket {i}'s norm"
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    assert not torch.isinf(buckets[0]).any().item(), f"step {step}: Inf in bucket 0"
    assert torch.isfinite(total).item(), f"step {step}: the total norm is not finite"
    opt.step()
    opt.zero_grad()
print("gradient checks agreed in every step")
