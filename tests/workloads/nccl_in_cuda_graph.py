"""Data-parallel gradient all-reduce captured in a CUDA graph with the MLP's forward and backward and
replayed each step (as torchtitan does by default)."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 512, device="cuda")


def step():
    model(x).square().mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, async_op=True).wait()


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    step()  # warm-up outside the graph
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=False)
with torch.cuda.graph(graph):
    step()
for _ in range(3):
    graph.replay()
    opt.step()
torch.cuda.synchronize()
dist.destroy_process_group()
print("replayed")
