"""A two-stage pipeline over four ranks (stages {0, 1} and {2, 3}, pipeline groups [0, 2] and [1, 3]) that
sends as Megatron-LM's `_p2p_ops` does for a two-rank pipeline group: activations forward over the pipeline
group, gradients back over the world group (whose peers are global ranks), then a data-parallel all-reduce of
the stage's weight gradient and an optimizer step."""

import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
rank = dist.get_rank()
stage, index = divmod(rank, 2)
pipelines = [dist.new_group([0, 2]), dist.new_group([1, 3])]
replicas = [dist.new_group([0, 1]), dist.new_group([2, 3])]
pipeline, replica = pipelines[index], replicas[stage]
peer = 2 + index if stage == 0 else index
layer = torch.nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
for _ in range(3):
    if stage == 0:
        y = layer(torch.randn(64, 256, device="cuda"))
        dist.isend(y.detach(), dst=peer, group=pipeline).wait()
        grad = torch.empty_like(y)
        dist.irecv(grad, src=peer).wait()  # the world group
        y.backward(grad)
    else:
        x = torch.empty(64, 256, device="cuda", requires_grad=True)
        dist.irecv(x.data, src=peer, group=pipeline).wait()
        layer(x).square().mean().backward()
        dist.isend(x.grad, dst=peer).wait()  # the world group
    dist.all_reduce(layer.weight.grad, group=replica)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
