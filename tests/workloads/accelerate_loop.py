"""A custom training loop with Hugging Face Accelerate, as its examples write one: `Accelerator(mixed_precision="bf16",
gradient_accumulation_steps=2)`, `accelerator.prepare`, `accumulate`, `backward`, `clip_grad_norm_`, a small causal
transformer on random tokens. Users start it with `accelerate launch --num_processes N`; under maya, `maya emulate
--nproc-per-node N -- python accelerate_loop.py` (the launcher's environment is torchrun's)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = (
            x
            + self.attn(
                h,
                h,
                h,
                need_weights=False,
                is_causal=True,
                attn_mask=nn.Transformer.generate_square_subsequent_mask(x.size(1), device=x.device),
            )[0]
        )
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=8192, d=512, heads=8, layers=6, seq=256):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main():
    accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    data = torch.randint(0, 8192, (4096, 257))
    loader = DataLoader(TensorDataset(data), batch_size=16, shuffle=True)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()
    for epoch in range(3):
        for step, (batch,) in enumerate(loader):
            with accelerator.accumulate(model):
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if step % 10 == 0:
                accelerator.print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
