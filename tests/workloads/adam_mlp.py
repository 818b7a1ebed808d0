"""An MLP of known sizes trained with Adam in fp32 for 2 steps: what holds its memory is known exactly.

Parameters: `Linear(2048, 8192)` and `Linear(8192, 2048)`, 33,564,672 fp32 values (134,258,688 bytes); their
gradients take as much, and Adam's state twice as much (`exp_avg`, `exp_avg_sq`; with `capturable=False` each
parameter's step count lives on the host). The batch is small (64 rows), so the peak is in an optimizer step,
where the parameters, every gradient, the state and the step's own temporaries are live at once.
"""

import torch

model = torch.nn.Sequential(torch.nn.Linear(2048, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 2048)).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(2):
    x = torch.randn(64, 2048, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
