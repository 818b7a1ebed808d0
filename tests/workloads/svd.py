"""Calls a cuSOLVER routine, which Maya does not emulate."""

import torch

torch.linalg.svd(torch.randn(64, 64, device="cuda"))
