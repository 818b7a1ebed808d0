"""A pipeline whose layers exchange within their passes, on plain torch.distributed: ranks in Megatron-Core's order
(rank = c + cp (d + dp s): context-parallel position `c`, data-parallel `d`, stage `s`), `--pp` stages of 2 blocks,
`--microbatches` micro-batches a step (all forwards, then all backwards), `--steps` optimizer steps. Each block's
attention passes its activations around its `--cp` ring (one `batch_isend_irecv` to the next and from the previous
member a step, in the module's forward and again in its backward); a step whose received part comes from a lower
member runs a second GEMM, as a causal ring's load-balanced halves make the members differ. Stages exchange
activations and gradients between passes; gradients are all-reduced over data x context parallelism."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

DIM, VOCAB, SEQ = 256, 512, 64

parser = argparse.ArgumentParser()
parser.add_argument("--pp", type=int, default=2)
parser.add_argument("--cp", type=int, default=2)
parser.add_argument("--microbatches", type=int, default=4)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
cp, pp = args.cp, args.pp
dp = world // (cp * pp)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
c, d, s = rank % cp, rank // cp % dp, rank // (cp * dp)


def place(c: int, d: int, s: int) -> int:
    return c + cp * (d + dp * s)


def groups(members) -> dist.ProcessGroup:
    """Every rank creates every group of a kind (torch's rule); returns the one holding this rank."""
    mine = None
    for ranks in members:
        group = dist.new_group(ranks)
        mine = group if rank in ranks else mine
    return mine


ring = groups([[place(x, d2, s2) for x in range(cp)] for s2 in range(pp) for d2 in range(dp)])
pipe = groups([[place(c2, d2, x) for x in range(pp)] for d2 in range(dp) for c2 in range(cp)])
data = groups([[place(y, x, s2) for x in range(dp) for y in range(cp)] for s2 in range(pp)])
ring_ranks = [place(x, d, s) for x in range(cp)]
first, last = s == 0, s == pp - 1


def pass_around(x: torch.Tensor, step: int, backward: bool) -> torch.Tensor:
    """One ring step: `x` to the next member, the previous member's part received (reversed in the backward)."""
    nxt, prev = ring_ranks[(c + 1) % cp], ring_ranks[(c - 1) % cp]
    to, frm = (prev, nxt) if backward else (nxt, prev)
    got = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, to, group=ring), dist.P2POp(dist.irecv, got, frm, group=ring)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return got


class Ring(torch.autograd.Function):
    """Ring attention's exchanges: `cp - 1` steps, in the forward and again in the backward."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        out, part = x, x
        for step in range(cp - 1):
            part = pass_around(part.contiguous(), step, False)
            lower = (c - step - 1) % cp < c
            out = out + (part @ weight @ weight if lower else part @ weight)
        return out

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        out, part = grad, grad
        for step in range(cp - 1):
            part = pass_around(part.contiguous(), step, True)
            out = out + part @ weight.t()
        return out, grad.t() @ grad


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, DIM)
        self.mix = nn.Parameter(torch.eye(DIM) * 0.1)

    def forward(self, x):
        return Ring.apply(self.qkv(x), self.mix)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.mlp(x)


blocks: list[nn.Module] = [nn.Embedding(VOCAB, DIM)] if first else []
blocks += [Block(), Block()]
blocks += [nn.Linear(DIM, VOCAB)] if last else []
model = nn.Sequential(*blocks).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def exchange(tensor: torch.Tensor | None, peer: int | None, receive: bool) -> torch.Tensor | None:
    """A send to (or receive from) pipeline rank `peer` between passes; None at the pipeline's end."""
    if peer is None or not 0 <= peer < pp:
        return None
    other = dist.get_global_rank(pipe, peer)
    got = torch.empty(SEQ, DIM, device="cuda", requires_grad=True) if receive else None
    op = (
        dist.P2POp(dist.irecv, got, other, group=pipe) if receive else dist.P2POp(dist.isend, tensor, other, group=pipe)
    )
    for work in dist.batch_isend_irecv([op]):
        work.wait()
    return got


for _step in range(args.steps):
    tokens = torch.randint(0, VOCAB, (SEQ,), device="cuda")
    live = []
    for _ in range(args.microbatches):
        x = exchange(None, s - 1, True)
        out = model(tokens if first else x)
        if last:
            out = nn.functional.cross_entropy(out, tokens)
        else:
            exchange(out.detach(), s + 1, False)
        live.append((x, out))
    for x, out in reversed(live):
        grad = None if last else exchange(None, s + 1, True)
        out.backward(grad)
        if not first:
            exchange(x.grad, s - 1, False)
    for p in model.parameters():
        dist.all_reduce(p.grad, group=data)
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
dist.destroy_process_group()
