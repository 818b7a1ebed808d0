"""DeepSpeed's gradient-norm checks (`mask_nan_or_inf_with_val_inplace`, `combine_grad_norm_groups`,
`is_invalid_grad_norm`), three steps over gradients only a GPU computes: the norm's NaN/Inf is masked in place
with a -1.0 sentinel the host put on the device, the sentinel is freed, and the stacked norm takes its block
(a one-element `stack` issues a copy, no kernel). The stacked norm is still only a GPU's value: every step
must read "a valid norm", as a healthy run does, not the freed sentinel's -1."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(3))).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
invalid_steps, reused = [], 0
for step in range(3):
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    norm = torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]).pow(2).sum().pow(0.5)
    masked = norm.isnan().logical_or(norm.isinf())
    sentinel = torch.full((), -1.0, device="cuda")
    norm.masked_fill_(masked, sentinel)
    block = sentinel.data_ptr()
    del sentinel
    stacked = torch.stack([norm])
    reused += stacked.data_ptr() == block
    if bool((~torch.isfinite(stacked) | (stacked < 0)).any()):
        invalid_steps.append(step)
    opt.step()
    opt.zero_grad()
print(f"the stacked norm took the sentinel's block in {reused} of 3 steps; invalid norm in steps {invalid_steps}")
