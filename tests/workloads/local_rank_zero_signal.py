"""Local rank 0 signals the other local ranks through a file, as Composer's `local_rank_zero_download_and_wait`
does for llm-foundry's tokenizer: the others wait for the file (named by rank 0's broadcast) to exist, every rank
passes a barrier, local rank 0 removes it. Then a file rank 0 writes only after the next barrier (and removes
after the one after) must not exist yet for a rank that has not passed that barrier. `DIR`: where the files go;
`--timeout S`: a waiting rank fails after S seconds instead of waiting forever.

    python local_rank_zero_signal.py DIR [--timeout S]
"""

import argparse
import os
import time
import uuid

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--timeout", type=float, default=60.0)
args = parser.parse_args()
dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
names = [f"signal-{uuid.uuid4().hex}", f"late-{uuid.uuid4().hex}"]
dist.broadcast_object_list(names, src=0)
signal, late = (os.path.join(args.dir, name) for name in names)

if local_rank != 0:
    deadline = time.monotonic() + args.timeout
    while not os.path.exists(signal):
        if time.monotonic() > deadline:
            raise RuntimeError(f"local rank {local_rank} waited {args.timeout:.0f} s for {signal}")
        time.sleep(0.05)
else:
    with open(signal, "w") as f:
        f.write("local rank zero done")
dist.barrier()
if local_rank == 0:
    os.remove(signal)
elif os.path.exists(late):
    raise RuntimeError(f"local rank {local_rank} sees {late}, which local rank 0 writes after the next barrier")
dist.barrier()
if local_rank == 0:
    with open(late, "w") as f:
        f.write("written after the second barrier")
dist.barrier()
if local_rank == 0:
    os.remove(late)
dist.destroy_process_group()
