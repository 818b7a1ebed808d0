"""A small CRNN text recogniser trained in fp32 with AdamW: a learned affine spatial transformer
rectifying the line image, convolutions with batch norm, a bidirectional LSTM over its columns and CTC
loss (int32 targets on the host, as cuDNN's CTC wants them); then one evaluation pass."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, HEIGHT, WIDTH, CLASSES, HIDDEN, LABEL = 4, 16, 32, 12, 32, 5


class CRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d((HEIGHT, 1))
        )
        self.lstm = nn.LSTM(16, HIDDEN, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grid = F.affine_grid(self.theta.expand(images.shape[0], 2, 3), list(images.shape), align_corners=True)
        images = F.grid_sample(images, grid, align_corners=True)
        columns = self.features(images).squeeze(2).permute(2, 0, 1)  # [width, batch, channels]
        y, _ = self.lstm(columns)
        return self.head(y).log_softmax(-1)


model = CRNN().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(2):
    images = torch.randn(BATCH, 1, HEIGHT, WIDTH, device="cuda")
    targets = torch.randint(1, CLASSES, (BATCH * LABEL,), dtype=torch.int32)
    loss = F.ctc_loss(model(images), targets, [WIDTH] * BATCH, [LABEL] * BATCH)
    loss.backward()
    opt.step()
    opt.zero_grad()
model.eval()
with torch.no_grad():
    model(torch.randn(BATCH, 1, HEIGHT, WIDTH, device="cuda"))
print("ok")
