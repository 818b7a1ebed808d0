"""A dense MLP trained with activation recomputation (`torch.utils.checkpoint`; argument `none`, `reentrant` or
`non-reentrant`) and a cross-entropy stabilised by the logits' max along the vocabulary as Megatron's is (the
max's indices are dropped: no routing decision)."""

import sys

import torch
from torch.utils.checkpoint import checkpoint

mode = sys.argv[1] if len(sys.argv) > 1 else "none"
if mode not in ("none", "reentrant", "non-reentrant"):
    raise SystemExit(f"recompute mode {mode!r}: choose none, reentrant or non-reentrant")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])
        self.head = torch.nn.Linear(256, 512)

    def forward(self, x):
        for block in self.blocks:
            x = block(x) if mode == "none" else checkpoint(block, x, use_reentrant=mode == "reentrant")
        return self.head(x)


def cross_entropy(logits, target):
    with torch.no_grad():
        logits_max = torch.max(logits, dim=-1)[0]
    shifted = logits - logits_max.unsqueeze(-1)
    return (torch.logsumexp(shifted, -1) - shifted.gather(-1, target.unsqueeze(-1)).squeeze(-1)).mean()


net = Net().cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(64, 256, device="cuda", requires_grad=True)  # reentrant checkpointing needs an input that does
    target = torch.randint(0, 512, (64,), device="cuda")
    cross_entropy(net(x), target).backward()
    opt.step()
    opt.zero_grad()
