"""Three launches: the thread sleeps 20 ms before the second and spins 5 ms of its own CPU before the third."""

import time

import torch

x = torch.zeros(16, device="cuda")
x.add_(1)
time.sleep(0.02)
x.add_(1)
until = time.thread_time() + 0.005
while time.thread_time() < until:
    pass
x.add_(1)
torch.cuda.synchronize()
