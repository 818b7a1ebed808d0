"""A typical Lightning user script: Lightning's demo Transformer on WikiText2, as in Lightning's
"Train models with billions of parameters" (FSDP) guide: `L.Trainer(accelerator="gpu", devices=2,
strategy="ddp" | "fsdp", precision="bf16-mixed")`, a validation loop every 50 steps (and Lightning's sanity
check before training). WikiText2 reads ./data/wikitext-2.txt (`framework_assets.write_wikitext`) before it
would download it."""

import argparse

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.demos import Transformer, WikiText2
from torch.utils.data import DataLoader


class LanguageModel(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, nlayers=4, nhid=2048, ninp=512, nhead=8)

    def training_step(self, batch):
        input, target = batch
        output = self.model(input, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch):
        input, target = batch
        output = self.model(input, target)
        self.log("val_loss", F.nll_loss(output, target.view(-1)), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--max-steps", type=int, default=100)
    args = parser.parse_args()

    L.seed_everything(42)
    dataset = WikiText2(block_size=128)
    train, val = torch.utils.data.random_split(dataset, [0.9, 0.1])
    model = LanguageModel(vocab_size=dataset.vocab_size)
    trainer = L.Trainer(
        accelerator="gpu",
        devices=args.devices,
        strategy=args.strategy,
        precision=args.precision,
        max_steps=args.max_steps,
        val_check_interval=50,
    )
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=16))
    trainer.print(torch.cuda.memory_summary())
