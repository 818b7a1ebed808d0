"""A small MLP trained with SGD, its forward and backward replayed as CUDA graphs (`graph`) or run eagerly (any other
argument): 16 small layers, so the eager step is launch-bound."""

import sys

import torch

torch.manual_seed(0)
layers = []
for _ in range(8):
    layers += [torch.nn.Linear(128, 128), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).cuda()
x = torch.randn(32, 128, device="cuda")
if sys.argv[1:] == ["graph"]:
    model = torch.cuda.make_graphed_callables(model, (x,))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(8):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
print("ok")
