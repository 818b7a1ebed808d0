"""grouped_gemm's CUDA extension in an emulated rank: its calls run as the torch ops that compute the same.

Mixture-of-experts code built on the `grouped_gemm` package (nanotron's MoE layers, Megatron's legacy `GroupedMLP`,
`--moe-use-legacy-grouped-gemm`) needs its extension, `grouped_gemm_backend`, which only a CUDA build makes: its setup
asks the GPU for its compute capability and runs nvcc. On a CPU-only machine the package's Python code installs
without it (`python -m maya.installer.grouped_gemm`), and this module, last on an emulated rank's path (an installed
extension comes first and wins), answers its calls. It speaks the extension API of Trevor Gale's package (0.1-0.3 on
the package registry: `gmm`) and of NVIDIA's fork that Megatron and nanotron name (1.x: `gmm`, `permute`,
`unpermute`, `unpermute_bwd`; `sinkhorn` fails loudly, naming itself):

- `gmm` runs one GEMM per expert, as the package's default build does (cuBLAS mode: one `cublasGemmEx` per group,
  the group sizes read on the host); a build with `GROUPED_GEMM_CUTLASS=1` launches one grouped CUTLASS kernel
  instead, which this does not model. Each GEMM writes into the caller's `c`, as the extension's do.
- `permute` sorts the routing choices (torch's stable sort where the fork runs cub's radix sort) and gathers the
  tokens' rows; `unpermute` sums each token's weighted rows in one `embedding_bag` kernel, as the fork's one kernel
  does; `unpermute_bwd` scatters the weighted gradients and computes the weights' gradients with a gather and a
  batched product (more memory traffic than the fork's fused kernel: an upper bound of its time).

Calls are named in the trace (`grouped_gemm::<call>`, a range around the ops that answer them), and the prediction's
notes count them.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

RANGE = "grouped_gemm::"
"""The prefix of the trace ranges that name this module's calls."""

_opaque = torch.compiler.disable
"""The extension's calls are opaque to torch.compile, as a compiled extension's are: a graph break, not traced."""


@_opaque
def gmm(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, batch_sizes: torch.Tensor, trans_a: bool, trans_b: bool
) -> None:
    """Grouped GEMM into `c`: rows of `a` in groups of `batch_sizes` (a host tensor), times `b[i]` per group.

    Shapes, as the extension checks them: `trans_a` (the weights' gradient): a [tokens, in], b [tokens, out], c
    [groups, in, out]; otherwise a [tokens, in], b [groups, in, out] ([groups, out, in] with `trans_b`), c [tokens,
    out]. bf16 device tensors, contiguous; `batch_sizes` int64 on the host.
    """
    _check(not (trans_a and trans_b), "gmm: trans_a and trans_b cannot both be set")
    _check(batch_sizes.device.type == "cpu", "gmm: batch_sizes must be a host tensor (cuBLAS mode)")
    _check(batch_sizes.dim() == 1 and batch_sizes.dtype == torch.int64, "gmm: batch_sizes must be 1-d int64")
    for name, t, dims in (("a", a, 2), ("b", b, 2 if trans_a else 3), ("c", c, 3 if trans_a else 2)):
        _check(t.is_cuda and t.dim() == dims, f"gmm: {name} must be a {dims}-d device tensor")
        _check(t.dtype == torch.bfloat16, f"gmm: {name} must be bf16, got {t.dtype}")
        _check(t.is_contiguous(), f"gmm: {name} must be contiguous")
    groups = batch_sizes.shape[0]
    if trans_a:
        _check(b.shape[0] == a.shape[0], "gmm: a and b must have as many rows")
        _check(tuple(c.shape) == (groups, a.shape[1], b.shape[1]), "gmm: c must be [groups, a's columns, b's columns]")
    else:
        _check(b.shape[0] == groups, "gmm: batch_sizes must hold one size per group of b")
        _check((b.shape[2] if trans_b else b.shape[1]) == a.shape[1], "gmm: a's columns must be b's contraction size")
        _check(sum(batch_sizes.tolist()) <= a.shape[0], "gmm: batch_sizes add up to more rows than a has")
    with torch.profiler.record_function(f"{RANGE}gmm"):
        _gmm(a, b, c, batch_sizes.tolist(), trans_a, trans_b)


def _gmm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, sizes: list[int], trans_a: bool, trans_b: bool) -> None:
    """One GEMM per group into `c`, as the extension's cuBLAS mode runs them (a group of no rows launches none)."""
    start = 0
    for i, rows in enumerate(sizes):
        end = start + rows
        if trans_a:  # the weights' gradient: a group's rows contract
            torch.mm(a[start:end].t(), b[start:end], out=c[i])
        elif rows:
            torch.mm(a[start:end], b[i].t() if trans_b else b[i], out=c[start:end])
        start = end


@_opaque
def permute(
    inputs: torch.Tensor, indices: torch.Tensor, num_out_tokens: int, workspace: list[torch.Tensor], max_expanded: int
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Tokens' rows grouped by expert: the permuted rows, the map back (`row_id_map`), and the workspace.

    `indices` [tokens, top-k] int32 names each token's experts. Rows are ordered by expert, stably (a token's
    choices in token order); only the first `num_out_tokens` (0: all) are kept, and `row_id_map[k * tokens + t]` is
    where token t's k-th choice went (-1: dropped). The workspace (the sort's buffers, made on the first call for
    `max_expanded` choices) is returned for the next call, as the fork's Python code expects.
    """
    _check(inputs.is_cuda and inputs.dim() == 2, "permute: the input must be a 2-d device tensor")
    _check(indices.is_cuda and indices.dim() == 2, "permute: indices must be a 2-d device tensor")
    _check(indices.dtype == torch.int32, "permute: indices must be int32")
    _check(indices.numel() <= max_expanded, "permute: more routing choices than the workspace holds")
    with torch.profiler.record_function(f"{RANGE}permute"):
        if not workspace:
            workspace = _workspace(max_expanded, inputs.device)
        return (*_permute(inputs, indices, num_out_tokens), workspace)


def _workspace(size: int, device: torch.device) -> list[torch.Tensor]:
    """The fork's sort buffers: sorted keys, row ids, sorted row ids (int32 each), and the sort's scratch (sized as
    cub's alternate key and value buffers; its few kB of histograms are not counted)."""
    ints = {"dtype": torch.int32, "device": device}
    return [torch.empty(size, **ints), torch.arange(size, **ints), torch.empty(size, **ints),
            torch.empty(8 * size, dtype=torch.int8, device=device)]  # fmt: skip


def _permute(inputs: torch.Tensor, indices: torch.Tensor, num_out_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The permuted rows and `row_id_map` (see `permute`)."""
    tokens, top_k = indices.shape
    choices = tokens * top_k
    kept = num_out_tokens if num_out_tokens > 0 else choices
    order = torch.sort(indices.reshape(-1), stable=True).indices  # choice t * top_k + k, in expert order
    permuted = inputs.index_select(0, order[:kept] // top_k)
    slot = torch.arange(choices, dtype=torch.int32, device=inputs.device)
    row_id_map = torch.empty(choices, dtype=torch.int32, device=inputs.device)
    row_id_map[(order % top_k) * tokens + order // top_k] = torch.where(slot < kept, slot, -1)
    return permuted, row_id_map


@_opaque
def unpermute(
    inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor, num_tokens: int, num_topk: int
) -> torch.Tensor:
    """Each token's rows back in token order, summed over its choices and weighted by `prob` [tokens, top-k] (fp32;
    an empty tensor: unweighted). Dropped choices (-1 in `row_id_map`) add nothing."""
    _check(inputs.is_cuda and inputs.dim() == 2, "unpermute: the input must be a 2-d device tensor")
    _check(row_id_map.dtype == torch.int32, "unpermute: row_id_map must be int32")
    _check(row_id_map.numel() == num_tokens * num_topk, "unpermute: row_id_map must hold tokens x top-k entries")
    weighted = prob.numel() > 0
    if weighted:
        _check(prob.dtype == torch.float32, "unpermute: prob must be fp32")
        _check(tuple(prob.shape) == (num_tokens, num_topk), "unpermute: prob must be [tokens, top-k]")
    with torch.profiler.record_function(f"{RANGE}unpermute"):
        return _unpermute(inputs, row_id_map, prob if weighted else None, num_tokens, num_topk)


def _rows(row_id_map: torch.Tensor, num_tokens: int, num_topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's permuted rows [tokens, top-k] (a dropped choice reads row 0) and which are kept."""
    rows = row_id_map.view(num_topk, num_tokens).t()
    kept = rows >= 0
    return rows.clamp(min=0).long(), kept


def _unpermute(
    inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor | None, num_tokens: int, num_topk: int
) -> torch.Tensor:
    """The tokens' weighted sums (see `unpermute`): one `embedding_bag` over each token's rows."""
    rows, kept = _rows(row_id_map, num_tokens, num_topk)
    weights = kept.to(inputs.dtype) if prob is None else (prob * kept).to(inputs.dtype)
    return torch.nn.functional.embedding_bag(rows, inputs, mode="sum", per_sample_weights=weights)


@_opaque
def unpermute_bwd(
    grad: torch.Tensor, inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `unpermute` with weights: the permuted rows' [rows, hidden] (a dropped row's is left
    unwritten, as the fork's kernel leaves it) and the weights' [tokens, top-k] fp32."""
    _check(grad.is_cuda and grad.dim() == 2 and inputs.is_cuda, "unpermute_bwd: device tensors expected")
    _check(prob.dim() == 2 and prob.dtype == torch.float32, "unpermute_bwd: prob must be fp32 [tokens, top-k]")
    with torch.profiler.record_function(f"{RANGE}unpermute_bwd"):
        return _unpermute_bwd(grad, inputs, row_id_map, prob)


def _unpermute_bwd(
    grad: torch.Tensor, inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """See `unpermute_bwd`: a dropped choice's row goes to a spare last row (no host sync to mask it)."""
    num_tokens, num_topk = prob.shape
    rows, kept = _rows(row_id_map, num_tokens, num_topk)
    spare = inputs.shape[0]
    act_grad = torch.empty(spare + 1, grad.shape[1], dtype=grad.dtype, device=grad.device)
    weighted = (grad.unsqueeze(1) * prob.unsqueeze(-1).to(grad.dtype)).reshape(-1, grad.shape[1])
    act_grad.index_copy_(0, torch.where(kept, rows, spare).reshape(-1), weighted)
    picked = inputs.index_select(0, rows.reshape(-1)).view(num_tokens, num_topk, -1)
    prob_grad = torch.bmm(picked.float(), grad.float().unsqueeze(-1)).squeeze(-1) * kept
    return act_grad[:spare], prob_grad


@_opaque
def sinkhorn(cost: torch.Tensor, tol: float = 0.0001) -> NoReturn:
    """Refused: the fork's Sinkhorn kernel iterates to a tolerance on device values."""
    raise NotImplementedError(
        "grouped_gemm_backend.sinkhorn is not implemented by Maya's stand-in for grouped_gemm's CUDA extension (its "
        "iterations run until a tolerance on device values)"
    )


def _check(ok: bool, message: str) -> None:
    """Fail as the extension's TORCH_CHECK does: a RuntimeError naming the call."""
    if not ok:
        raise RuntimeError(f"grouped_gemm_backend.{message}")


def __getattr__(name: str) -> Any:
    """Any other call of the extension fails loudly, naming itself."""
    raise AttributeError(
        f"grouped_gemm_backend.{name} is not implemented by Maya's stand-in for grouped_gemm's CUDA extension"
    )
