"""DeepSpeed's own engine as its getting-started tutorial writes a script, started by its launcher (`deepspeed
--num_gpus N deepspeed_engine.py --deepspeed_config ds.json`): the `--local_rank` the launcher gives each rank,
`deepspeed.add_config_arguments`, `deepspeed.initialize`, `engine.backward` and `engine.step` on a small causal
transformer. The optimizer is the config's (`"torch_adam": true`: PyTorch's, not the fused one DeepSpeed builds
with nvcc at first use)."""

import argparse
import os

import deepspeed
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab=8192, d=512, layers=4, heads=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        mask = nn.Transformer.generate_square_subsequent_mask(idx.size(1), device=idx.device)
        return self.head(self.blocks(self.emb(idx), mask=mask, is_causal=True))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=10)
    args = deepspeed.add_config_arguments(parser).parse_args()
    assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
    deepspeed.init_distributed()
    torch.cuda.set_device(args.local_rank)
    model = TinyLM()
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    for _ in range(args.steps):
        batch = torch.randint(0, 8192, (engine.train_micro_batch_size_per_gpu(), 257), device=engine.device)
        logits = engine(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
    print(f"rank {engine.global_rank} (--local_rank={args.local_rank}) of {engine.world_size}: {args.steps} steps")


if __name__ == "__main__":
    main()
