"""A Hugging Face Llama-style causal LM built from a config (GQA, RMSNorm, SwiGLU), bf16, fused AdamW."""

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), fused=True)
ids = torch.randint(0, 32000, (2, 256), device="cuda")
for _step in range(2):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    print("loss", out.loss.item())
