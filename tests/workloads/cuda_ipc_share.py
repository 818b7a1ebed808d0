"""Shares a CUDA tensor with another process the way torch.multiprocessing does (a CUDA IPC handle), torch alone."""

import torch
from torch.multiprocessing.reductions import reduce_tensor

reduce_tensor(torch.ones(4, device="cuda"))
print("shared")
