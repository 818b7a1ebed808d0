"""grouped_gemm's CUDA extension in an emulated rank: its calls run as the torch ops that compute the same.

Mixture-of-experts code built on the `grouped_gemm` package (nanotron's MoE layers; Megatron-LM's legacy
`GroupedMLP`, `--moe-use-legacy-grouped-gemm`, up to core_r0.16) needs its extension, `grouped_gemm_backend`, which
only a CUDA build makes: its setup asks the GPU for its compute capability and runs nvcc. On a CPU-only machine the
package's Python code installs without it (`python -m maya.installer.grouped_gemm`), and this module, last on an
emulated rank's path (an installed extension comes first and wins), answers its calls. It speaks the extension API of
Trevor Gale's package (`grouped_gemm` 0.1-0.3: `gmm`) and of NVIDIA's fork that Megatron-LM and nanotron name
(`grouped_gemm` 1.x on GitHub, `nv-grouped-gemm` on the package registry: `gmm`, `permute`, `unpermute`,
`unpermute_bwd`; `sinkhorn` fails loudly, naming itself):

- `gmm` runs one cuBLAS GEMM per expert into the caller's `c`, the group sizes read on the host (an expert with no
  tokens launches none), as both packages' builds do where they do not use CUTLASS: serially on the current stream
  (Gale's cuBLAS mode), or round robin over 4 side streams that wait for the current one and that it waits for
  (the fork's `NUM_STREAM`). Not modelled: Gale's `GROUPED_GEMM_CUTLASS=1` build and the fork's sm_80 build made
  without `TORCH_CUDA_ARCH_LIST`, which run a product without `trans_b` as one CUTLASS grouped kernel.
- `permute` sorts the routing choices (torch's stable sort where the fork runs cub's radix sort) and gathers the
  tokens' rows; `unpermute` sums each token's weighted rows in one `embedding_bag` kernel, as the fork's one kernel
  does; `unpermute_bwd` gathers each row's gradient, takes its dot with the row (a batched product) for the weight's
  gradient and scales it in place: the fork's outputs and no temporary of their size (more kernels than its one).
  With one choice a token, as the fork, the weights are not applied and their gradient is not computed.

Calls are named in the trace (`grouped_gemm::<call>`, a range around the ops that answer them), the prediction's
notes count them, and they are opaque to `torch.compile` (a graph break, as at a compiled extension).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
from typing import Any, NoReturn

import torch

from maya.emulator.extension_calls import on_device as _on_device
from maya.emulator.extension_calls import traced_call

RANGE = "grouped_gemm::"
"""The prefix of the trace ranges that name this module's calls."""
FORK_STREAMS = 4
"""The side streams NVIDIA's fork spreads an expert's GEMMs over (its `NUM_STREAM`)."""
ACTIVATIONS = (torch.float32, torch.float16, torch.bfloat16)
"""The activation types the fork's permutation kernels are built for (fp8 is off in its build)."""


def _release() -> tuple[str, str]:
    """The installed grouped_gemm distribution and its version (NVIDIA's fork: `nv-grouped-gemm`, or `grouped_gemm`
    1.x from its repository; Gale's original: `grouped_gemm` 0.x)."""
    for distribution in ("nv-grouped-gemm", "grouped_gemm"):
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise ImportError(
        "grouped_gemm_backend: grouped_gemm is not installed (Maya's stand-in for its CUDA extension runs the "
        "package's own Python code: python -m maya.installer.grouped_gemm)"
    )


DISTRIBUTION, VERSION = _release()
SIDE_STREAMS = FORK_STREAMS if DISTRIBUTION == "nv-grouped-gemm" or not VERSION.startswith("0.") else 0
"""The side streams `gmm` runs its GEMMs on: the fork's 4, or none (Gale's original: the current stream)."""

_call = traced_call(RANGE)
"""A call of the extension: in a trace range of its name (`RANGE`), opaque to torch.compile as a compiled
extension's is."""


@_call
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
        _check(_on_device(t) and t.dim() == dims, f"gmm: {name} must be a {dims}-d device tensor")
        _check(t.dtype == torch.bfloat16, f"gmm: {name} must be bf16, got {t.dtype}")
        _check(t.is_contiguous(), f"gmm: {name} must be contiguous")
    groups, sizes = batch_sizes.shape[0], batch_sizes.tolist()
    _check(sum(sizes) <= a.shape[0], "gmm: batch_sizes add up to more rows than a has")
    if trans_a:
        _check(b.shape[0] == a.shape[0], "gmm: a and b must have as many rows")
        _check(tuple(c.shape) == (groups, a.shape[1], b.shape[1]), "gmm: c must be [groups, a's columns, b's columns]")
    else:
        _check(b.shape[0] == groups, "gmm: batch_sizes must hold one size per group of b")
        _check((b.shape[2] if trans_b else b.shape[1]) == a.shape[1], "gmm: a's columns must be b's contraction size")
        out = b.shape[1] if trans_b else b.shape[2]
        _check(tuple(c.shape) == (a.shape[0], out), "gmm: c must be [a's rows, b's output size]")
    if not SIDE_STREAMS:
        _gmm(a, b, c, sizes, trans_a, trans_b)
        return
    current, streams = torch.cuda.current_stream(), _side_streams()
    ready = current.record_event()  # as the fork: one event the side streams wait for, one each it waits for
    for stream in streams:
        stream.wait_event(ready)
    _gmm(a, b, c, sizes, trans_a, trans_b, streams)
    for stream in streams:
        current.wait_event(stream.record_event())


_STREAMS: list[torch.cuda.Stream] = []


def _side_streams() -> list[torch.cuda.Stream]:
    """The fork's side streams, its own (not torch's pool, which its collectives' streams come from), made on its
    first call on the device current then, as the fork's are."""
    if not _STREAMS:
        for _ in range(SIDE_STREAMS):
            handle = ctypes.c_void_p()
            error = torch._C._cudart.cudaStreamCreate(ctypes.addressof(handle))
            _check(int(error) == 0, f"gmm: cudaStreamCreate failed ({error})")
            _STREAMS.append(torch.cuda.ExternalStream(handle.value))
    return _STREAMS


def _gmm(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    sizes: list[int],
    trans_a: bool,
    trans_b: bool,
    streams: list[torch.cuda.Stream] | None = None,
) -> None:
    """One GEMM per group into `c` (a group of no rows launches none), group i on `streams[i % len(streams)]` where
    given."""
    start = 0
    for i, rows in enumerate(sizes):
        end = start + rows
        with torch.cuda.stream(streams[i % len(streams)]) if streams else contextlib.nullcontext():
            if trans_a:  # the weights' gradient: a group's rows contract
                torch.mm(a[start:end].t(), b[start:end], out=c[i])
            elif rows:
                torch.mm(a[start:end], b[i].t() if trans_b else b[i], out=c[start:end])
        start = end


@_call
def permute(
    inputs: torch.Tensor, indices: torch.Tensor, num_out_tokens: int, workspace: list[torch.Tensor], max_expanded: int
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Tokens' rows grouped by expert: the permuted rows, the map back (`row_id_map`), and the workspace.

    `indices` [tokens, top-k] int32 names each token's experts. Rows are ordered by expert, stably (a token's
    choices in token order); only the first `num_out_tokens` (0: all) are kept, and `row_id_map[k * tokens + t]` is
    where token t's k-th choice went (-1: dropped). The workspace (the sort's buffers, made on the first call for
    `max_expanded` choices) is returned for the next call, as the fork's Python code expects.
    """
    _check(_on_device(inputs) and inputs.dim() == 2, "permute: the input must be a 2-d device tensor")
    _check(inputs.dtype in ACTIVATIONS, f"permute: wrong activation tensor type {inputs.dtype}")
    _check(_on_device(indices) and indices.dim() == 2, "permute: indices must be a 2-d device tensor")
    _check(indices.dtype == torch.int32, "permute: indices must be int32")
    _check(indices.numel() <= max_expanded, "permute: more routing choices than the workspace holds")
    _check(
        num_out_tokens <= indices.numel(),
        "permute: num_out_tokens above tokens x top-k (rows no choice fills) is not implemented by Maya's stand-in",
    )
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


@_call
def unpermute(
    inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor, num_tokens: int, num_topk: int
) -> torch.Tensor:
    """Each token's rows back in token order, summed over its choices and weighted by `prob` [tokens, top-k] (fp32;
    an empty tensor, or one choice a token: unweighted, as the fork). Dropped choices (-1 in `row_id_map`) add
    nothing."""
    _check(_on_device(inputs) and inputs.dim() == 2, "unpermute: the input must be a 2-d device tensor")
    _check(inputs.dtype in ACTIVATIONS, f"unpermute: wrong activation tensor type {inputs.dtype}")
    _check(row_id_map.dtype == torch.int32, "unpermute: row_id_map must be int32")
    _check(row_id_map.numel() == num_tokens * num_topk, "unpermute: row_id_map must hold tokens x top-k entries")
    weighted = prob.numel() > 0 and num_topk > 1
    if weighted:
        _check(prob.dtype == torch.float32, "unpermute: prob must be fp32")
        _check(tuple(prob.shape) == (num_tokens, num_topk), "unpermute: prob must be [tokens, top-k]")
    return _unpermute(inputs, row_id_map, prob if weighted else None, num_tokens, num_topk)


def _unpermute(
    inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor | None, num_tokens: int, num_topk: int
) -> torch.Tensor:
    """The tokens' weighted sums (see `unpermute`): one `embedding_bag` over each token's rows (a dropped choice
    reads row 0 with weight 0)."""
    rows = row_id_map.view(num_topk, num_tokens).t()
    kept = rows >= 0
    weights = kept.to(inputs.dtype) if prob is None else (prob * kept).to(inputs.dtype)
    return torch.nn.functional.embedding_bag(rows.clamp(min=0).long(), inputs, mode="sum", per_sample_weights=weights)


@_call
def unpermute_bwd(
    grad: torch.Tensor, inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `unpermute`: the permuted rows' [rows, hidden] and the weights' [tokens, top-k] fp32 (with
    one choice a token, as the fork, the rows' gradient unweighted and the weights' left unwritten)."""
    _check(_on_device(grad) and grad.dim() == 2 and _on_device(inputs), "unpermute_bwd: device tensors expected")
    _check(grad.dtype in ACTIVATIONS, f"unpermute_bwd: wrong activation tensor type {grad.dtype}")
    _check(prob.dim() == 2 and prob.dtype == torch.float32, "unpermute_bwd: prob must be fp32 [tokens, top-k]")
    _check(prob.shape[1] <= 128, "unpermute_bwd: top-k above 128 is not supported (the fork's limit)")
    _check(row_id_map.numel() == prob.numel(), "unpermute_bwd: row_id_map must hold tokens x top-k entries")
    return _unpermute_bwd(grad, inputs, row_id_map, prob)


def _unpermute_bwd(
    grad: torch.Tensor, inputs: torch.Tensor, row_id_map: torch.Tensor, prob: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """See `unpermute_bwd`. Each permuted row gathers its token's gradient (a row no kept choice names reads another's,
    where the fork leaves it unwritten), its dot with the row is the weight's gradient (a batched product, rounded to
    the activations' type where the fork keeps fp32), and it is scaled in place: no temporary of the outputs' size,
    and no host sync."""
    num_tokens, num_topk = prob.shape
    rows, choices = inputs.shape[0], prob.numel()
    owners = row_id_map.view(num_topk, num_tokens).t().reshape(-1).long()  # choice t * top_k + k -> its row
    choice = torch.full((rows + 1,), choices, dtype=torch.long, device=grad.device)  # unnamed rows: the spare choice
    choice.index_copy_(0, torch.where(owners >= 0, owners, rows), torch.arange(choices, device=grad.device))
    choice = choice[:rows]
    named = choice.clamp(max=choices - 1)  # an unnamed row reads the last choice's values, and writes nothing back
    act_grad = grad.index_select(0, named // num_topk)
    if num_topk == 1:
        return act_grad, torch.empty(num_tokens, 1, dtype=torch.float32, device=grad.device)
    dots = torch.bmm(act_grad.unsqueeze(1), inputs.unsqueeze(2)).view(rows)  # each row's gradient . its value
    act_grad.mul_(prob.view(-1).index_select(0, named).to(act_grad.dtype).unsqueeze(1))
    prob_grad = torch.zeros(choices + 1, dtype=torch.float32, device=grad.device)
    prob_grad.index_copy_(0, choice, dots.float())
    return act_grad, prob_grad[:choices].view(num_tokens, num_topk)


@_call
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
