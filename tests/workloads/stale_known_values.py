"""Loops on device values the host knew until a kernel rewrote them: `torch._foreach_add_` (which returns
nothing) adds a value only a GPU computes to a buffer the host filled, in a loop read with `.cpu()` and with
`.item()` (on a GPU: one pass each); both forms of one unknown value read the same; and (`--endless`) a loop
on a known value no op changes, which spins on a GPU too."""

import sys

import torch

g = torch.randn(1, device="cuda")  # only a GPU knows it
x = torch.zeros(1, device="cuda")  # filled on the host side: known (0)
passes = 0
while x.cpu()[0] < 1 and passes < 30:
    torch._foreach_add_([x], [g.abs() + 1])
    passes += 1
print(f"copy loop ended after {passes} passes")
y = torch.zeros(1, device="cuda")
passes = 0
while y.item() < 1 and passes < 30:
    torch._foreach_add_([y], [g.abs() + 1])
    passes += 1
print(f"item loop ended after {passes} passes")
u = g * 3  # unknown, its allocation's bytes set by the host first
u.fill_(7).mul_(g)
print(f"unknown read: copy {u.cpu()[0].item()} item {u.item()}")
if "--endless" in sys.argv:
    k = torch.zeros(1, device="cuda")
    passes = 0
    while k.cpu()[0] < 1 and passes < 1000:  # nothing changes k: a GPU spins here too (to the cap)
        g = g * 2
        passes += 1
    print(f"endless loop ran {passes} passes")
