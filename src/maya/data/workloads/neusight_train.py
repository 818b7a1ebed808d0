"""Forward + backward of a Hugging Face model built from a NeuSight config, measured the way NeuSight's
e2e labels were (`neusight/Tracing/trace.py: measure_e2e`): fp32, TF32 off, cuDNN benchmark on, random
weights, inputs all ones, eager attention, train mode; each iteration frees the allocator's cache, times
the forward with CUDA events, computes the loss untimed, then times `loss.backward()`. Prints the mean
of the fastest `--sample` forward and backward times.

Usage: python neusight_train.py CONFIG.json --batch B --seq S [--iterations N] [--sample K]
"""

from __future__ import annotations

import argparse
import gc
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForPreTraining, AutoModelForSeq2SeqLM


def build(config_path: str) -> tuple[torch.nn.Module, bool]:
    """The model of the config on the GPU (created there: no host copy of the weights), and whether it is
    an encoder-decoder."""
    with open(config_path) as f:
        architecture = json.load(f)["architectures"][0].lower()
    config = AutoConfig.from_pretrained(config_path)
    if "bert" in architecture:
        cls, seq2seq = AutoModelForPreTraining, False
    elif "switch" in architecture:
        cls, seq2seq = AutoModelForSeq2SeqLM, True
    else:
        cls, seq2seq = AutoModelForCausalLM, False
    with torch.device("cuda"):  # fp32 whatever the config's torch_dtype (2023 transformers ignored it)
        model = cls.from_config(config, attn_implementation="eager", dtype=torch.float32)
    return model.train(), seq2seq


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--iterations", type=int, default=25)
    p.add_argument("--sample", type=int, default=5)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model, seq2seq = build(args.config)
    ids = torch.ones(args.batch, args.seq, dtype=torch.int64, device="cuda")
    inputs = {"input_ids": ids, "attention_mask": ids, "decoder_input_ids": ids} if seq2seq else {"input_ids": ids}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    forward, backward = [], []
    for _ in range(args.iterations):
        gc.collect()
        torch.cuda.empty_cache()
        start.record()
        result = model(**inputs)
        end.record()
        torch.cuda.synchronize()
        forward.append(start.elapsed_time(end))
        logits = result["prediction_logits"] if "prediction_logits" in result else result["logits"]
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))
        result = logits = None
        start.record()
        loss.backward()
        end.record()
        loss = None
        torch.cuda.synchronize()
        backward.append(start.elapsed_time(end))
    fw = sum(sorted(forward)[: args.sample]) / min(args.sample, len(forward))
    bw = sum(sorted(backward)[: args.sample]) / min(args.sample, len(backward))
    print(json.dumps({"fw_ms": fw, "bw_ms": bw, "e2e_ms": fw + bw}))


if __name__ == "__main__":
    main()
