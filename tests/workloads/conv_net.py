"""A small convolutional network trained in bf16 with cuDNN autotuning, as image models are."""

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True
model = nn.Sequential(
    nn.Conv2d(3, 64, 3, padding=1),
    nn.BatchNorm2d(64),
    nn.ReLU(),
    nn.Conv2d(64, 128, 3, stride=2, padding=1, groups=2),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(128, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(2):
    x = torch.randn(8, 3, 32, 32, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x).float(), torch.randint(0, 10, (8,), device="cuda"))
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
