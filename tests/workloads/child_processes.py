"""A rank that starts processes of every kind, some of them touching CUDA, and says what each did.

In order: a `multiprocessing` fork before CUDA is initialised (its child allocates and runs a GEMM, as it could on
a GPU), then CUDA in the rank, a fork after it (torch refuses CUDA there, as on a GPU), a `spawn` child and a
`subprocess` that both run a GEMM, `nvidia-smi -L` (NVML queries only), and a DataLoader whose two forked workers
never touch CUDA.
"""

import multiprocessing as mp
import subprocess
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

GEMM = "import torch; a = torch.ones(128, 128, device='cuda'); (a @ a).sum().item()"


def gemm(done):
    a = torch.ones(128, 128, device="cuda")
    (a @ a).sum().item()
    done.put("gemm")


def refused(done):
    try:
        torch.ones(1, device="cuda")
        done.put("allowed")
    except RuntimeError as e:
        done.put(str(e).split(".")[0])


def child(method, target):
    ctx = mp.get_context(method)
    done = ctx.Queue()
    p = ctx.Process(target=target, args=(done,))
    p.start()
    said = done.get(timeout=60)
    p.join()
    print(f"{method} child: {said} (exit {p.exitcode})", flush=True)


if __name__ == "__main__":
    child("fork", gemm)
    x = torch.ones(64, 64, device="cuda")
    (x @ x).sum().item()
    child("fork", refused)
    child("spawn", gemm)
    print("subprocess exit", subprocess.run([sys.executable, "-c", GEMM]).returncode, flush=True)
    print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout.strip())
    m = torch.nn.Linear(8, 1).cuda()
    for (batch,) in DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=64, num_workers=2):
        m(batch.cuda()).sum().backward()
    print("done", flush=True)
