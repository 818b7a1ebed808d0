"""A small Llama trained with Hugging Face's `Trainer` as users write it, under torchrun: DDP (the default),
FSDP through accelerate (`--mode fsdp`: FSDP2, full shard, wrapping decoder layers) or DeepSpeed ZeRO
(`--mode zero1|zero2|zero3`, with PyTorch's AdamW: DeepSpeed's fused CUDA optimizers are compiled at run
time). Random token data; bf16; no checkpoints or loggers. `--liger`: `use_liger_kernel=True` (Liger-Kernel's Triton
RMSNorm, RoPE, SwiGLU and fused linear cross-entropy patched into the Llama by transformers)."""

import argparse
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--mode", default="ddp", choices=["ddp", "fsdp", "zero1", "zero2", "zero3"])
p.add_argument("--steps", type=int, default=4)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--liger", action="store_true")
args = p.parse_args()


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


config = LlamaConfig(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=args.seq,
)
model = LlamaForCausalLM(config)
options = {}
if args.mode == "fsdp":
    options = {
        "fsdp": "full_shard auto_wrap",
        "fsdp_config": {"version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]},
    }
elif args.mode.startswith("zero"):
    options = {
        "deepspeed": {
            "zero_optimization": {"stage": int(args.mode[-1])},
            "bf16": {"enabled": True},
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto",
            "zero_allow_untested_optimizer": True,
        }
    }
training = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    max_steps=args.steps,
    per_device_train_batch_size=4,
    learning_rate=3e-4,
    bf16=True,
    logging_steps=1,
    save_strategy="no",
    report_to=[],
    dataloader_num_workers=0,
    disable_tqdm=True,
    use_liger_kernel=args.liger,
    **options,
)
trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(64, args.seq, config.vocab_size))
trainer.train()
print(f"trained {args.mode} for {trainer.state.global_step} steps")
