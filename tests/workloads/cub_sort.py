"""Ops that torch runs through CUB, which dispatches on the PTX version cudaFuncGetAttributes reports for
its kernels: an embedding backward over more than 3072 indices (sorts them: embedding_dense_backward_cuda ->
radix_sort_pairs, as BERT's backward at batch 8 x seq 512) and torch.sort. Then prints what the runtime
calls a few error codes (name | description)."""

import ctypes

import torch

embedding = torch.nn.Embedding(1024, 64, device="cuda")
ids = torch.ones(8, 512, dtype=torch.int64, device="cuda")  # 4096 indices
embedding(ids).sum().backward()
values, order = torch.sort(torch.ones(10000, device="cuda"))
torch.cuda.synchronize()
print("cub ok", flush=True)

cudart = ctypes.CDLL("libcudart.so.13")
cudart.cudaGetErrorName.restype = cudart.cudaGetErrorString.restype = ctypes.c_char_p
for code in (98, 209, 401, 901, 12345):
    print(f"error {code} {cudart.cudaGetErrorName(code).decode()} | {cudart.cudaGetErrorString(code).decode()}")
