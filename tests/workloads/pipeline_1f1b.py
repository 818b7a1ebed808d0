"""Megatron-LM's non-interleaved 1F1B schedule on plain torch.distributed point-to-point: `--stages` stages (one
rank each; `--layers` per interior stage, comma-separated per stage, else 2 each), `--microbatches` micro-batches a
step, `--steps` optimizer steps. As `forward_backward_pipelining_without_interleaving` and `p2p_communication`: stage
`s` runs `min(stages - s - 1, microbatches)` warm-up forwards, then (forward, backward) pairs, then the cool-down
backwards; each exchange with a neighbour allocates its receive buffers, runs as one `batch_isend_irecv` and
synchronises."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

DIM, VOCAB, SEQ = 256, 512, 32

parser = argparse.ArgumentParser()
parser.add_argument("--stages", type=int, default=6)
parser.add_argument("--layers", default="")
parser.add_argument("--microbatches", type=int, default=6)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
layers = [int(n) for n in args.layers.split(",")] if args.layers else [2] * args.stages
dist.init_process_group("nccl")
stage, world = dist.get_rank(), dist.get_world_size()
assert world == args.stages == len(layers), (world, args.stages, layers)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
pipe = dist.new_group(list(range(world)))
first, last = stage == 0, stage == world - 1

blocks: list[nn.Module] = [nn.Embedding(VOCAB, DIM)] if first else []
blocks += [nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM)) for _ in range(layers[stage])]
blocks += [nn.Linear(DIM, VOCAB)] if last else []
model = nn.Sequential(*blocks).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def communicate(send_next=None, send_prev=None, recv_prev=False, recv_next=False):
    """One exchange with the neighbours (Megatron's `_communicate`): receive buffers, one batched launch, a sync."""
    got_prev = torch.empty(SEQ, DIM, device="cuda", requires_grad=True) if recv_prev and not first else None
    got_next = torch.empty(SEQ, DIM, device="cuda") if recv_next and not last else None
    ops = []
    if send_prev is not None and not first:
        ops.append(dist.P2POp(dist.isend, send_prev, stage - 1, group=pipe))
    if got_prev is not None:
        ops.append(dist.P2POp(dist.irecv, got_prev, stage - 1, group=pipe))
    if send_next is not None and not last:
        ops.append(dist.P2POp(dist.isend, send_next, stage + 1, group=pipe))
    if got_next is not None:
        ops.append(dist.P2POp(dist.irecv, got_next, stage + 1, group=pipe))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        torch.cuda.synchronize()
    return got_prev, got_next


def forward(x, tokens):
    """One micro-batch's forward: the stage's output, or the loss on the last stage."""
    out = model(tokens if first else x)
    return nn.functional.cross_entropy(out, tokens) if last else out


def backward(x, out, grad):
    """One micro-batch's backward: the gradient of the stage's input (None on the first stage)."""
    out.backward(None if last else grad)
    return None if first else x.grad


for _step in range(args.steps):
    tokens = torch.randint(0, VOCAB, (SEQ,), device="cuda")
    warmup = min(world - stage - 1, args.microbatches)
    live = []
    for _ in range(warmup):
        x, _ = communicate(recv_prev=True)
        out = forward(x, tokens)
        communicate(send_next=None if last else out.detach())
        live.append((x, out))
    x = communicate(recv_prev=True)[0] if args.microbatches > warmup else None
    for i in range(args.microbatches - warmup):
        out = forward(x, tokens)
        grad = communicate(send_next=None if last else out.detach(), recv_next=True)[1]
        live.append((x, out))
        x_done, out_done = live.pop(0)
        dx = backward(x_done, out_done, grad)
        if i == args.microbatches - warmup - 1:
            communicate(send_prev=dx)
        else:
            x = communicate(send_prev=dx, recv_prev=True)[0]
    for _ in range(warmup):
        grad = communicate(recv_next=True)[1]
        dx = backward(*live.pop(0), grad)
        communicate(send_prev=dx)
    opt.step()
    opt.zero_grad()
print("ok")
dist.destroy_process_group()
