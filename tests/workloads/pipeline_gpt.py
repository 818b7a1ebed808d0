"""A small GPT split into one pipeline stage per rank with torch.distributed.pipelining (1F1B); `--steps N`
training steps (2)."""

import argparse
import inspect
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

DIM, HEADS, LAYERS, VOCAB, SEQ, BATCH, MICROBATCHES = 256, 4, 4, 1000, 64, 8, 4


class Stage(nn.Module):
    def __init__(self, first: bool, last: bool, layers: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM) if first else None
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(DIM, HEADS, 4 * DIM, batch_first=True) for _ in range(layers)
        )
        self.head = nn.Linear(DIM, VOCAB) if last else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(device)
model = Stage(rank == 0, rank == world - 1, LAYERS // world).to(device)
example = {}
if inspect.signature(PipelineStage).parameters["input_args"].default is inspect.Parameter.empty:
    # torch < 2.6 needs the stage's example input (later releases learn its shape from the previous stage)
    example["input_args"] = (
        torch.randint(0, VOCAB, (BATCH // MICROBATCHES, SEQ), device=device)
        if rank == 0
        else torch.empty(BATCH // MICROBATCHES, SEQ, DIM, device=device),
    )
stage = PipelineStage(model, rank, world, device, **example)
schedule_class = Schedule1F1B if os.environ.get("SCHEDULE", "1f1b") == "1f1b" else ScheduleGPipe
schedule = schedule_class(
    stage,
    n_microbatches=MICROBATCHES,
    loss_fn=lambda out, y: nn.functional.cross_entropy(out.flatten(0, 1), y.flatten()),
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(args.steps):
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
    if rank == 0:
        schedule.step(tokens)
    elif rank == world - 1:
        losses = []
        schedule.step(target=tokens, losses=losses)
    else:
        schedule.step()
    opt.step()
    opt.zero_grad()
print("ok")
dist.destroy_process_group()
