"""PyTorch's native context parallelism (ring attention over SDPA) on a small causal transformer, launched by
torchrun: every rank is one position of the ring (`torch.distributed.tensor.experimental.context_parallel`:
inputs and labels sharded along the sequence with torch's head-tail load balancing, each SDPA call dispatched
to the ring), gradients all-reduced by DDP over the same ranks. `--rotate allgather|alltoall` picks how the
forward passes keys and values round the ring (`set_rotate_method`; the backward's gradients always go by
all-to-all)."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import set_rotate_method
from torch.nn.parallel import DistributedDataParallel


class Block(nn.Module):
    """Pre-norm attention (causal SDPA) and MLP."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.GELU(), nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    """Token embedding, `layers` blocks, a final norm and the output head."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rotate", choices=("allgather", "alltoall"), default="allgather")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()

    dist.init_process_group("nccl")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("cp",))
    set_rotate_method(args.rotate)
    torch.manual_seed(0)
    model = Model(args.vocab, args.dim, args.heads, args.layers).cuda().to(torch.bfloat16)
    model = DistributedDataParallel(model, device_ids=[local])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device="cuda")
        inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        with context_parallel(
            mesh, buffers=[inputs, labels], buffer_seq_dims=[1, 1], no_restore_buffers={inputs, labels}
        ):
            logits = model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
