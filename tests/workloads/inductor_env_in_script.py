"""Sets an Inductor switch itself before importing torch, then prints what Inductor's settings say."""

import os

os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"

import torch  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402

print(f"max_autotune={inductor_config.max_autotune}", flush=True)
x = torch.ones(64, 64, device="cuda")
(x @ x).sum().item()
