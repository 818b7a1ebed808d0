"""Bookkeeping over values the host put on the device, read back as a real run reads them: a token count
of labels (`(labels != -100).sum()`, as validation loops divide by it), an all-reduced count (with
`dist.all_reduce` and with functional collectives, whose `wait_tensor` goes through a tensor subclass), expert
counts of a top-2 routing of router scores only a GPU computes (`bincount`, `histc`), the tokens of one
expert (`nonzero`), offsets (`cumsum(...).tolist()`), one expert's count copied to the host in each of four layers
(`.to("cpu")`, 8 bytes)."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
labels = torch.randint(0, 100, (8, 128), generator=torch.Generator().manual_seed(0))
labels[:, :10] = -100
tokens = torch.tensor(0, dtype=torch.int64, device="cuda")
tokens += (labels.cuda() != -100).sum()
dist.all_reduce(tokens)
print(f"tokens {tokens.item()} of {(labels != -100).sum().item()}")
total = torch.zeros((), dtype=torch.int64, device="cuda")  # torchtitan's validation: a functional all-reduce
total.add_(funcol.wait_tensor(funcol.all_reduce(tokens, "SUM", group=dist.group.WORLD)))
print(f"functional all-reduce tokens {total.item()}")
scores = torch.randn(64, 8, device="cuda").softmax(-1)
_, experts = scores.topk(2, dim=-1)
print(f"bincount {torch.bincount(experts.view(-1), minlength=8).tolist()}")
print(f"histc {torch.histc(experts.view(-1).float(), bins=8, min=0, max=8).int().tolist()}")
print(f"expert 3 rows {torch.where(experts[:, 0] == 3)[0].numel()}")
print(f"offsets {torch.cumsum(torch.bincount(experts.view(-1), minlength=8), 0).tolist()}")
h = torch.randn(64, 64, device="cuda")
counts = []
for _layer in range(
    4
):  # Megatron's all-to-all dispatcher with one local expert: its 8-byte count to the host per layer
    h = h @ h
    _, chosen = h[:, :4].topk(2, dim=-1)
    counts.append(torch.bincount(chosen.view(-1), minlength=4)[:1].to("cpu", non_blocking=True))
    torch.cuda.current_stream().synchronize()
    counts[-1] = counts[-1].tolist()[0]
print(f"one-expert counts {counts}")
x = torch.ones(1024, device="cuda")  # a loop on values the host knows runs as on a GPU
passes = 0
while not (x > 1e6).all().item():
    x = x * 2
    passes += 1
print(f"doubling loop ended after {passes} passes")
dist.destroy_process_group()
