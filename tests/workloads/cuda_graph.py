"""Inference of a small MLP captured once in a CUDA graph and replayed three times."""

import torch

m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)).cuda()
x = torch.randn(16, 256, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = m(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = m(x)
for _i in range(3):
    x.copy_(torch.randn(16, 256, device="cuda"))
    g.replay()
torch.cuda.synchronize()
print("ok", y.shape)
