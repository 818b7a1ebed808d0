"""Training fed by a DataLoader with two worker processes (forked from the training process) and pinned memory."""

import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
dl = DataLoader(ds, batch_size=64, num_workers=2, pin_memory=True)
m = torch.nn.Linear(64, 10).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i, (x, y) in enumerate(dl):
    loss = torch.nn.functional.cross_entropy(m(x.cuda(non_blocking=True)), y.cuda())
    loss.backward()
    opt.step()
    opt.zero_grad()
    if i == 20:
        break
print("ok")
