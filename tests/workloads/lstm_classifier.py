"""A small sequence classifier trained with AdamW: token embeddings, a bidirectional 2-layer LSTM with
dropout between its layers (optionally over packed variable-length sequences), a GRU or tanh RNN over
its outputs and a linear head on the last hidden state."""

import argparse

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

parser = argparse.ArgumentParser()
parser.add_argument("--vocab", type=int, default=100)
parser.add_argument("--embed", type=int, default=24)
parser.add_argument("--hidden", type=int, default=40)
parser.add_argument("--classes", type=int, default=5)
parser.add_argument("--batch", type=int, default=4)
parser.add_argument("--seq", type=int, default=6)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--top", choices=["gru", "rnn_tanh"], default="gru")
parser.add_argument("--packed", action="store_true", help="sequences of lengths seq, seq-1, ... (at least 1)")
parser.add_argument("--autocast", choices=["none", "fp16", "bf16"], default="none")
args = parser.parse_args()


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.embed)
        self.lstm = nn.LSTM(args.embed, args.hidden, num_layers=2, bidirectional=True, batch_first=True, dropout=0.2)
        top = nn.GRU if args.top == "gru" else nn.RNN
        self.top = top(2 * args.hidden, args.hidden, batch_first=True)
        self.head = nn.Linear(args.hidden, args.classes)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        x = self.embed(tokens)
        if lengths is not None:
            x = pack_padded_sequence(x, lengths, batch_first=True)
        y, _ = self.lstm(x)
        if lengths is not None:
            y, _ = pad_packed_sequence(y, batch_first=True, total_length=args.seq)
        _, h = self.top(y)
        return self.head(h[-1])


model = Classifier().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
lengths = torch.clamp(torch.arange(args.seq, args.seq - args.batch, -1), min=1) if args.packed else None
dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.autocast)
for _step in range(args.steps):
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    labels = torch.randint(0, args.classes, (args.batch,), device="cuda")
    with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
        logits = model(tokens, lengths)
    loss = nn.functional.cross_entropy(logits.float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("ok")
