"""Copies and a memset of known sizes: 4096 float32 to the device and back (16384 bytes each way), 8192 bytes
copied on the device, 65536 bytes zeroed."""

import torch

host = torch.arange(4096, dtype=torch.float32)
device = host.cuda()
back = device.cpu()
copied = torch.empty(2048, dtype=torch.float32, device="cuda")
copied.copy_(device[:2048])
zeroed = torch.empty(1 << 16, dtype=torch.uint8, device="cuda")
zeroed.zero_()
torch.cuda.synchronize()
print("copied")
