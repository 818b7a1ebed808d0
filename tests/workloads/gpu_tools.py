"""What training scripts and their loggers ask about the GPUs: `nvidia-smi` (the default table, -L,
--query-gpu as CSV), pynvml, and torch.cuda's NVML-backed queries, after allocating 1 GiB."""

import subprocess

import pynvml
import torch

block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
print(subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=True).stdout)
print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout, end="")
query = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.used,memory.total,utilization.gpu",
    "--format=csv,noheader,nounits",
]
print("query:", subprocess.run(query, capture_output=True, text=True, check=True).stdout, end="")

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
print(
    f"pynvml: {pynvml.nvmlDeviceGetName(handle)} used={memory.used} total={memory.total}"
    f" util={pynvml.nvmlDeviceGetUtilizationRates(handle).gpu}"
)
used = torch.cuda.device_memory_used() if hasattr(torch.cuda, "device_memory_used") else "-"  # torch >= 2.6
print(f"torch: used={used} utilization={torch.cuda.utilization()} memory_usage={torch.cuda.memory_usage()}")
try:
    pynvml.nvmlDeviceGetEncoderUtilization(handle)
except pynvml.NVMLError as e:
    print(f"unemulated NVML call: {e}")
