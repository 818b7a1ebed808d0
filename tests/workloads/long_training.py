"""A script written to train for 10,000 steps: two optimizers per step (AdamW and SGD, as speed-run
scripts pair Muon with Adam) and a validation pass (eval mode, no grad) every `--eval-every` steps."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10_000)
parser.add_argument("--eval-every", type=int, default=3)
args = parser.parse_args()

model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).cuda()
adam = torch.optim.AdamW(model[0].parameters())
sgd = torch.optim.SGD(model[2].parameters(), lr=0.01)
x = torch.randn(64, 512, device="cuda")
for step in range(args.steps):
    if step % args.eval_every == 0:
        model.eval()
        with torch.no_grad():
            val = model(x).square().mean()
        print(f"step {step}: validation loss {val.item():.4f}")
        model.train()
    model(x).square().mean().backward()
    adam.step()
    sgd.step()
    adam.zero_grad()
    sgd.zero_grad()
print("finished all steps")
