"""A GPT trained with FSDP2 over the data-parallel dim and tensor parallelism (optionally sequence
parallel) over the other dim of a 2-D DeviceMesh, for `maya search` (benchmarks/search.py).

Few layers but a realistic width, so the emulation is quick while memory and time are those of a large
model. The global batch is fixed; micro-batches = global batch / (micro-batch size * data-parallel size).

    torchrun --nproc-per-node 8 fsdp_tp_gpt.py --tp 2 --mbs 2 --recompute mlp --sequence-parallel
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--mbs", type=int, default=1, help="micro-batch size (sequences)")
p.add_argument("--global-batch", type=int, default=128, help="sequences per iteration")
p.add_argument("--recompute", choices=["none", "mlp", "full"], default="none")
p.add_argument("--sequence-parallel", action="store_true")
p.add_argument("--reshard", action="store_true", help="FSDP reshard_after_forward (ZeRO-3 style)")
p.add_argument("--params", choices=["bf16", "fp32"], default="bf16", help="FSDP param dtype")
p.add_argument("--reduce", choices=["bf16", "fp32"], default="fp32", help="FSDP gradient reduce dtype")
p.add_argument("--layers", type=int, default=4)
p.add_argument("--hidden", type=int, default=8192)
p.add_argument("--heads", type=int, default=64)
p.add_argument("--seq", type=int, default=16384)
p.add_argument("--vocab", type=int, default=32768)
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")  # before the mesh: its groups then carry names the emulator records
world = int(os.environ["WORLD_SIZE"])
dp = world // args.tp
microbatches = args.global_batch // (args.mbs * dp)
assert microbatches * args.mbs * dp == args.global_batch, "global batch must split into micro-batches"
mesh = init_device_mesh("cuda", (dp, args.tp), mesh_dim_names=("dp", "tp"))
sp = args.sequence_parallel and args.tp > 1


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        h = args.hidden
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, args.hidden // args.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        return self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(args.hidden, 4 * args.hidden), nn.Linear(4 * args.hidden, args.hidden)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = nn.LayerNorm(args.hidden), Attention()
        self.mlp_norm, self.mlp = nn.LayerNorm(args.hidden), MLP()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        mlp = lambda y: self.mlp(self.mlp_norm(y))  # noqa: E731
        return x + (checkpoint(mlp, x, use_reentrant=False) if args.recompute == "mlp" else mlp(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.hidden)
        self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
        self.norm, self.head = nn.LayerNorm(args.hidden), nn.Linear(args.hidden, args.vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.recompute == "full" else block(x)
        return self.head(self.norm(x))


with torch.device("meta"):
    model = GPT()
if args.tp > 1:
    seq_out = Shard(1) if sp else Replicate()
    block_plan = {
        "attn.wq": ColwiseParallel(),
        "attn.wk": ColwiseParallel(),
        "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=seq_out),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=seq_out),
    }
    if sp:
        gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        block_plan |= {"attn_norm": SequenceParallel(), "attn": gather, "mlp_norm": SequenceParallel(), "mlp": gather}
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], block_plan)
    parallelize_module(
        model,
        mesh["tp"],
        {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_out),
            **({"norm": SequenceParallel()} if sp else {}),
            "head": ColwiseParallel(input_layouts=seq_out, output_layouts=Replicate()),
        },
    )
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}
policy = MixedPrecisionPolicy(param_dtype=dtype[args.params], reduce_dtype=dtype[args.reduce])
for block in model.blocks:
    fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=args.reshard)
fully_shard(model, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=args.reshard)
model.to_empty(device="cuda")
for module in model.modules():
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

for _ in range(args.steps):
    for i in range(microbatches):
        model.set_requires_gradient_sync(i == microbatches - 1)
        ids = torch.randint(0, args.vocab, (args.mbs, args.seq + 1), device="cuda")
        logits = model(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
print("ok")
