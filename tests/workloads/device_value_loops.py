"""Loops on values only a GPU computes (from random draws, which the emulator never computes on the host):
`while not done.item()`, `while flag.item()` on a flag whose bytes a copy put there and a kernel then
updates, a convergence check with `torch.allclose`, and (`--endless`) one that no stand-in can end:
`while x.sum().item() != 12345`."""

import sys

import torch

x = torch.rand(1024, device="cuda") + 1
done = torch.zeros((), dtype=torch.bool, device="cuda")
passes = 0
while not done.item():
    x = x * 2
    done = (x > 1e6).all()
    passes += 1
print(f"flag loop ended after {passes} passes")

flag = torch.tensor(True).cuda()
passes = 0
while flag.item():
    flag &= torch.rand((), device="cuda") < 0.5
    passes += 1
print(f"sticky flag loop ended after {passes} passes")

y = torch.randn(256, device="cuda")
for passes in range(1, 1000):  # noqa: B007 (read after the loop)
    new = 0.5 * (y + 2 / y)
    if torch.allclose(new, y):
        break
    y = new
print(f"convergence loop ended after {passes} passes")

if "--endless" in sys.argv:
    while x.sum().item() != 12345:
        x = x + 1
