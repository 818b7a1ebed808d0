"""MegaBlocks' CUDA extension in an emulated rank: its calls run as the torch ops that compute the same.

MegaBlocks' mixtures of experts (`megablocks.layers.moe.MoE` and the dropless `dmoe.dMoE`; llm-foundry's `mb_moe`
and `mb_dmoe` layers) route tokens with its extension, `megablocks_ops`: sorts, histograms and prefix sums of the
experts' ids, the block-sparse topology of a dropless layer, and a replication of per-expert values. Its setup
builds the extension only where it finds a CUDA toolkit, and its Python code installs without it
(`python -m maya.installer.megablocks`). This module, last on an emulated rank's path (an installed extension comes
first and wins), answers its calls with torch's own kernels (sort, scatter-add, cumulative sum, repeat_interleave,
index_add), each writing into the caller's buffer, and none synchronising with the host where the extension does
not: the counts derived from the balanced router's choices stay known to the host, as on a GPU they are read there.
Where MegaBlocks runs one cub call (a radix sort, a histogram, a segmented sum) torch runs its own kernels for the
same work. Calls are named in the trace (`megablocks_ops::<call>`), and the prediction's notes count them.
"""

from __future__ import annotations

from typing import Any

import torch

from maya.emulator.extension_calls import on_device as _on_device
from maya.emulator.extension_calls import traced_call

RANGE = "megablocks_ops::"
"""The prefix of the trace ranges that name this module's calls."""
INTEGERS = (torch.int16, torch.int32, torch.int64)
"""The id types MegaBlocks' sorts, histograms and prefix sums take."""

_call = traced_call(RANGE)
"""A call of the extension: in a trace range of its name, opaque to torch.compile as a compiled extension is."""


@_call
def exclusive_cumsum(x: torch.Tensor, dim: int, out: torch.Tensor) -> None:
    """Exclusive prefix sums of each row of `x` ([rows, n] ints) into `out`."""
    _check_scan("exclusive_cumsum", x, dim, out)
    torch.cumsum(x, 1, out=out)
    out.sub_(x)


@_call
def inclusive_cumsum(x: torch.Tensor, dim: int, out: torch.Tensor) -> None:
    """Inclusive prefix sums of each row of `x` ([rows, n] ints) into `out`."""
    _check_scan("inclusive_cumsum", x, dim, out)
    torch.cumsum(x, 1, out=out)


def _check_scan(call: str, x: torch.Tensor, dim: int, out: torch.Tensor) -> None:
    _check(_on_device(x) and x.dim() == 2 and x.dtype in INTEGERS, f"{call}: x must be a 2-d device int tensor")
    _check(_on_device(out) and out.dim() == 2 and out.dtype == x.dtype, f"{call}: out must be 2-d, of x's type")
    _check(dim == 1, f"{call}: only dim 1 is supported")


@_call
def histogram(x: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Counts of 0 .. num_bins - 1 in `x` (1-d, or each row of a 2-d), int32; other values are not counted."""
    _check(_on_device(x) and x.dim() in (1, 2) and x.dtype in INTEGERS, "histogram: x must be a 1-d or 2-d device "
           "int tensor")  # fmt: skip
    rows = x.view(1, -1) if x.dim() == 1 else x
    out = torch.zeros(rows.shape[0], num_bins, dtype=torch.int32, device=x.device)
    if num_bins:  # a value out of range is added to an edge bin as 0
        counted = (rows >= 0) & (rows < num_bins)
        out.scatter_add_(1, rows.clamp(0, num_bins - 1).long(), counted.int())
    return out.flatten() if x.dim() == 1 else out


@_call
def indices(
    padded_bins: torch.Tensor, block_size: int, output_block_rows: int, output_block_columns: int, out: torch.Tensor
) -> None:
    """The column indices of a dropless layer's block-sparse topology into `out` (int16): every block row of expert
    e (its rows end at `padded_bins[e]`, in blocks of `block_size`) holds e's `output_block_columns` columns."""
    _check(_on_device(padded_bins) and padded_bins.dim() == 1 and padded_bins.dtype == torch.int32,
           "indices: padded_bins must be a 1-d device int32 tensor")  # fmt: skip
    _check(out.dim() == 1 and out.dtype == torch.int16, "indices: out must be 1-d int16")
    _check(out.numel() == output_block_rows * output_block_columns, "indices: out must hold rows x columns blocks")
    if not out.numel():
        return
    starts = torch.arange(output_block_rows, device=out.device, dtype=torch.int32) * block_size
    expert = torch.bucketize(starts, padded_bins, right=True)  # the expert whose rows hold each block row
    columns = torch.arange(output_block_columns, device=out.device)
    out.copy_((expert.unsqueeze(1) * output_block_columns + columns).flatten())


@_call
def replicate_forward(x: torch.Tensor, bins: torch.Tensor, out: torch.Tensor) -> None:
    """Each value of `x` ([rows, bins]) repeated over its bin's columns of `out` (bin e ends at `bins[e]`)."""
    _check(_on_device(x) and x.dim() == 2 and x.dtype in (torch.float16, torch.int16, torch.int32),
           "replicate_forward: x must be a 2-d fp16, int16 or int32 device tensor")  # fmt: skip
    _check(_on_device(bins) and bins.dim() == 1 and bins.dtype == torch.int32,
           "replicate_forward: bins must be a 1-d int32 device tensor")  # fmt: skip
    _check(out.dim() == 2 and out.shape[0] == x.shape[0] and x.shape[1] == bins.shape[0] and out.dtype == x.dtype,
           "replicate_forward: out must be [x's rows, columns] of x's type, x one column a bin")  # fmt: skip
    out.copy_(x.repeat_interleave(_sizes(bins), dim=1, output_size=out.shape[1]))


@_call
def replicate_backward(grad: torch.Tensor, bins: torch.Tensor, out: torch.Tensor) -> None:
    """The gradient of `replicate_forward`: each bin's columns of `grad` summed into `out` ([rows, bins])."""
    _check(_on_device(grad) and grad.dim() == 2 and grad.dtype == torch.float16,
           "replicate_backward: grad must be a 2-d fp16 device tensor")  # fmt: skip
    _check(_on_device(bins) and bins.dim() == 1 and bins.dtype == torch.int32,
           "replicate_backward: bins must be a 1-d int32 device tensor")  # fmt: skip
    _check(out.dim() == 2 and out.shape == (grad.shape[0], bins.shape[0]) and out.dtype == torch.float16,
           "replicate_backward: out must be [grad's rows, bins] fp16")  # fmt: skip
    owner = torch.arange(bins.shape[0], device=grad.device).repeat_interleave(_sizes(bins), output_size=grad.shape[1])
    out.zero_().index_add_(1, owner, grad)


def _sizes(bins: torch.Tensor) -> torch.Tensor:
    """Each bin's width, from the bins' ends."""
    return torch.diff(bins, prepend=bins.new_zeros(1))


@_call
def sort(x: torch.Tensor, end_bit: int, x_out: torch.Tensor, iota_out: torch.Tensor) -> None:
    """`x` (1-d ints, below 2**end_bit) sorted into `x_out`, stably, and the positions they came from into
    `iota_out` (x's type), as MegaBlocks' radix sort of (key, index) pairs. All bits are sorted: MegaBlocks' keys
    (expert ids) are below 2**end_bit, so the order is its sort's; torch's sort may take more passes than its
    `end_bit` bits need."""
    _check(_on_device(x) and x.dim() == 1 and x.dtype in INTEGERS, "sort: x must be a 1-d device int tensor")
    _check(x_out.dtype == iota_out.dtype == x.dtype and x_out.shape == iota_out.shape == x.shape,
           "sort: x_out and iota_out must be x's shape and type")  # fmt: skip
    values, order = torch.sort(x, stable=True)
    x_out.copy_(values)
    iota_out.copy_(order)


def _check(ok: bool, message: str) -> None:
    """Fail as the extension's TORCH_CHECK does: a RuntimeError naming the call."""
    if not ok:
        raise RuntimeError(f"megablocks_ops.{message}")


def __getattr__(name: str) -> Any:
    """Any other call of the extension fails loudly, naming itself."""
    raise AttributeError(f"megablocks_ops.{name} is not implemented by Maya's stand-in for MegaBlocks' CUDA extension")
