"""megatron-core GPT (pure-PyTorch local layer spec) with tensor and pipeline parallelism, trained with
Megatron's forward-backward schedule (1F1B when pipelined)."""

import argparse
import os

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--pp", type=int, default=1)
p.add_argument("--microbatches", type=int, default=4)
args = p.parse_args()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
parallel_state.initialize_model_parallel(
    tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp, create_gloo_process_groups=False
)
model_parallel_cuda_manual_seed(123)
seq, mbs, vocab = 128, 2, 1024
config = TransformerConfig(num_layers=4, hidden_size=512, num_attention_heads=8, pipeline_dtype=torch.float32)
model = GPTModel(
    config=config,
    transformer_layer_spec=get_gpt_layer_local_spec(),
    vocab_size=vocab,
    max_sequence_length=seq,
    pre_process=parallel_state.is_pipeline_first_stage(),
    post_process=parallel_state.is_pipeline_last_stage(),
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def batches():
    while True:
        ids = torch.randint(0, vocab, (mbs, seq), device="cuda")
        yield ids, torch.arange(seq, device="cuda").unsqueeze(0).expand(mbs, -1)


def step(data, model):
    ids, pos = next(data)
    out = model(ids, pos, attention_mask=None, labels=ids)
    return out, lambda o: (o.float().mean(), {})


forward_backward = get_forward_backward_func()
data = batches()
for _ in range(2):
    forward_backward(
        forward_step_func=step,
        data_iterator=data,
        model=model,
        num_microbatches=args.microbatches,
        seq_length=seq,
        micro_batch_size=mbs,
        forward_only=False,
    )
    opt.step()
    opt.zero_grad()
print("ok")
