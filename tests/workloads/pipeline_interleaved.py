"""Megatron-LM's interleaved (virtual pipeline) schedule on plain torch.distributed point-to-point: `--stages` stages
(one rank each) of `--chunks` model chunks (`--layers` each), `--microbatches` micro-batches a step in groups of
`--group` (default: the stages), `--steps` optimizer steps (`--overlap-grad-reduce` is accepted for its name only:
this job reduces no gradients). As `forward_backward_pipelining_with_interleaving` with
`overlap_p2p_comm` (its default): virtual micro-batch `k` runs chunk `k // group % chunks` (backwards the chunks the
other way), stage `s` runs `2 (stages - s - 1) + (chunks - 1) group` warm-up forwards, then (forward, backward)
pairs, then the cool-down backwards; each send and receive is a launch of its own (`isend` / `irecv`), an odd stage
receiving before it sends and an even one sending first (`p2p_communication._p2p_ops`), the stages a ring (the last
stage's forward of chunk `c` goes to stage 0's chunk `c + 1`); the warm-up and cool-down wait for their launches at
once, the steady state for a receive before the block that needs it and for a send before the next of its
direction."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

DIM, VOCAB, SEQ = 64, 128, 16

parser = argparse.ArgumentParser()
parser.add_argument("--stages", type=int, default=8)
parser.add_argument("--chunks", type=int, default=2)
parser.add_argument("--layers", type=int, default=1)
parser.add_argument("--microbatches", type=int, default=16)
parser.add_argument("--group", type=int, default=0)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument(
    "--overlap-grad-reduce", action="store_true", help="Megatron-LM's option's name; changes nothing here"
)
args = parser.parse_args()
dist.init_process_group("nccl")
stage, world = dist.get_rank(), dist.get_world_size()
group = args.group or world
assert world == args.stages and args.microbatches % group == 0, (world, args.stages, args.microbatches, group)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
pipe = dist.new_group(list(range(world)))
prev, after = (stage - 1) % world, (stage + 1) % world
odd = stage % 2


def chunk_model(chunk: int) -> nn.Module:
    """Model chunk `chunk` of this stage: the embedding first, the head last."""
    first, last = stage == 0 and chunk == 0, stage == world - 1 and chunk == args.chunks - 1
    blocks: list[nn.Module] = [nn.Embedding(VOCAB, DIM)] if first else []
    blocks += [nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM)) for _ in range(args.layers)]
    blocks += [nn.Linear(DIM, VOCAB)] if last else []
    return nn.Sequential(*blocks).cuda()


chunks = [chunk_model(c) for c in range(args.chunks)]
opt = torch.optim.AdamW([p for m in chunks for p in m.parameters()], lr=1e-3)
total = args.chunks * args.microbatches


def chunk_of(k: int, forward: bool) -> int:
    """The model chunk of virtual micro-batch `k` (Megatron's `get_model_chunk_id`)."""
    chunk = k % (group * args.chunks) // group
    return chunk if forward else args.chunks - 1 - chunk


def exchange(send_next=None, send_prev=None, recv_prev=False, recv_next=False):
    """Launch one exchange's sends and receives in Megatron's order (`_p2p_ops`); the received tensors and the
    launches' works."""
    got_prev = torch.empty(SEQ, DIM, device="cuda", requires_grad=True) if recv_prev else None
    got_next = torch.empty(SEQ, DIM, device="cuda") if recv_next else None
    ops = {
        "S+": (dist.isend, send_next, after),
        "R-": (dist.irecv, got_prev, prev),
        "S-": (dist.isend, send_prev, prev),
        "R+": (dist.irecv, got_next, after),
    }
    order = ("R-", "S+", "R+", "S-") if odd else ("S+", "R-", "S-", "R+")
    works = {name: ops[name][0](ops[name][1], ops[name][2], group=pipe) for name in order if ops[name][1] is not None}
    return got_prev, got_next, works


def forward(k: int, x, tokens):
    """Virtual micro-batch `k`'s forward: the chunk's output, or the loss after the last stage's last chunk."""
    chunk = chunk_of(k, True)
    out = chunks[chunk](tokens if stage == 0 and chunk == 0 else x)
    if stage == world - 1 and chunk == args.chunks - 1:
        return nn.functional.cross_entropy(out, tokens)
    return out


def sends(k: int) -> bool:
    """Whether virtual micro-batch `k`'s forward output is sent on (not the last stage's last chunk's loss)."""
    return not (stage == world - 1 and chunk_of(k, True) == args.chunks - 1)


def receives(k: int, forward: bool) -> bool:
    """Whether virtual micro-batch `k`'s forward input (or backward gradient) comes from a neighbour."""
    if k >= total:
        return False
    chunk = chunk_of(k, forward)
    return not (stage == 0 and chunk == 0) if forward else not (stage == world - 1 and chunk == args.chunks - 1)


def backward(k: int, live, grad):
    """Virtual micro-batch `k`'s backward: the gradient of its chunk's input (None for the embedding's)."""
    x, out = live[chunk_of(k, False)].pop(0)
    out.backward(None if grad is None else grad)
    return None if x is None else x.grad


for _step in range(args.steps):
    tokens = torch.randint(0, VOCAB, (SEQ,), device="cuda")
    warmup = min(2 * (world - stage - 1) + (args.chunks - 1) * group, total)
    live: list[list] = [[] for _ in chunks]
    x, _, works = exchange(recv_prev=receives(0, True))
    for work in works.values():
        work.wait()
    grad, pending = None, {}
    for k in range(warmup):
        out = forward(k, x, tokens)
        live[chunk_of(k, True)].append((x, out))
        x, _, works = exchange(send_next=out.detach() if sends(k) else None, recv_prev=receives(k + 1, True))
        for work in works.values():
            work.wait()
        if k == warmup - 1:
            _, grad, pending = exchange(recv_next=receives(0, False))
    for j in range(total - warmup):
        k = warmup + j
        if "R-" in pending:
            pending.pop("R-").wait()
        out = forward(k, x, tokens)
        live[chunk_of(k, True)].append((x, out))
        x, _, works = exchange(send_next=out.detach() if sends(k) else None, recv_prev=receives(k + 1, True))
        if "S+" in pending:
            pending.pop("S+").wait()
        pending.update(works)
        if "R+" in pending:
            pending.pop("R+").wait()
        dx = backward(j, live, grad)
        _, grad, works = exchange(send_prev=dx, recv_next=receives(j + 1, False))
        if "S-" in pending:
            pending.pop("S-").wait()
        pending.update(works)
    for work in [pending.pop(name) for name in ("R-", "S+", "R+") if name in pending]:
        work.wait()
    for k in range(total - warmup, total):
        dx = backward(k, live, grad)
        _, grad, works = exchange(send_prev=dx, recv_next=receives(k + 1, False))
        for work in works.values():
            work.wait()
    if "S-" in pending:
        pending.pop("S-").wait()
    opt.step()
    opt.zero_grad()
print("ok")
dist.destroy_process_group()
