"""Prints what a rank process sees of its environment, then does a little CUDA work."""

import os
import random
import sys

import numpy as np
import torch

print(
    f"rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']} cwd={os.getcwd()} "
    f"extra={os.environ.get('MAYA_TEST_EXTRA')} stdin_tty={sys.stdin.isatty()} "
    f"stdin_eof={sys.stdin.read() == ''} py_random={random.random():.12f} np_random={np.random.rand():.12f}",
    flush=True,
)
x = torch.ones(256, 256, device="cuda")
(x @ x).sum().item()
if os.environ.get("MAYA_TEST_EXIT"):
    sys.exit(int(os.environ["MAYA_TEST_EXIT"]))
