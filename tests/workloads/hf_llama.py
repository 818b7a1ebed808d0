"""A Hugging Face Llama-style causal LM built from a config (GQA, RMSNorm, SwiGLU), bf16, fused AdamW.

`--attn IMPL`: transformers' attention implementation (default: its own choice); `--padded`: the second step's
batch has a padded row (with `flash_attention_2`, transformers unpads it and calls flash-attn's varlen function)."""

import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

parser = argparse.ArgumentParser()
parser.add_argument("--attn", default=None)
parser.add_argument("--padded", action="store_true")
args = parser.parse_args()
cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
chosen = {"attn_implementation": args.attn} if args.attn else {}
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, **chosen)
opt = torch.optim.AdamW(model.parameters(), fused=True)
ids = torch.randint(0, 32000, (2, 256), device="cuda")
mask = torch.ones_like(ids)
mask[1, 200:] = 0
for step in range(2):
    out = model(input_ids=ids, attention_mask=mask if args.padded and step == 1 else None, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    print("loss", out.loss.item())
