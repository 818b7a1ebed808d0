"""flash-attn's CUDA extension in an emulated rank: its calls run torch's port of the same FlashAttention-2 kernels.

A script that imports `flash_attn` (its `flash_attn_func`, `flash_attn_varlen_func`, the packed variants, the
modules and models built on them, transformers' `attn_implementation="flash_attention_2"`) needs flash-attn's
extension, `flash_attn_2_cuda`, which only a CUDA build makes (hours of nvcc; the registry has no wheel). On a
CPU-only machine flash-attn's Python code installs without it (`FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE
FLASH_ATTENTION_FORCE_BUILD=TRUE pip install --no-build-isolation flash-attn==2.8.3.post2`), and this module, last
on an emulated rank's path (an installed extension comes first and wins), answers its calls with torch's own
FlashAttention-2 port (`aten::_flash_attention_forward/backward`: Tri Dao's kernels, `pytorch_flash::flash_*`),
which computes the same attention. It speaks the extension API of flash-attn 2.6-2.8 (`fwd`, `varlen_fwd`, `bwd`,
`varlen_bwd`); what torch's port cannot do (ALiBi slopes in the backward, soft-capping, left padding, a generator
of its own, the KV-cache and paged calls) fails loudly, naming itself.

Gradients are written where flash-attn's kernel writes them, the buffers its Python code passes: a buffer that alone
holds its memory takes the gradient's storage (no copy; its memory is released before torch's kernel allocates, so
the peak is the package's); a buffer that shares its memory (the packed variants' `dqkv[:, :, i]`, an alias
Inductor made) gets a copy, a kernel the package's extension does not launch, and torch's gradients are held beside
the package's buffer until then. Maya's stand-ins are reported in the prediction's notes.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.deterministic

from maya.emulator.extension_calls import traced_call

SPEAKS = ("2.6.", "2.7.", "2.8.")
"""The flash-attn releases whose extension API this module implements (2.6's forward returns more: `RETURNS_INPUTS`)."""

try:
    VERSION = importlib.metadata.version("flash_attn")
except importlib.metadata.PackageNotFoundError:
    raise ImportError(
        "flash_attn_2_cuda: flash-attn is not installed (Maya's stand-in for its CUDA extension runs flash-attn's "
        "own Python code)"
    ) from None
if not VERSION.startswith(SPEAKS):
    raise ImportError(
        f"flash_attn_2_cuda: flash-attn {VERSION} is installed without its CUDA extension; Maya's stand-in speaks "
        f"the extension API of flash-attn {', '.join(v + 'x' for v in SPEAKS)} (install flash-attn==2.8.3.post2)"
    )
RANGE = "flash_attn_2_cuda::"
"""The prefix of the trace ranges that name this module's calls."""
RETURNS_INPUTS = VERSION.startswith("2.6.")
"""flash-attn 2.6's extension pads a head dimension that is not a multiple of 8 and its forward calls also return
the q, k, v and output its kernel read and wrote (2.7 on pad in their Python code and return less)."""

_FORWARD = torch.ops.aten._flash_attention_forward.default
_BACKWARD = torch.ops.aten._flash_attention_backward.default


def fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor | None,
    alibi_slopes: torch.Tensor | None,
    p_dropout: float,
    softmax_scale: float,
    is_causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    return_softmax: bool,
    gen: Any,
) -> list[torch.Tensor]:
    """Attention of q, k, v ([batch, sequence, heads, head dim]): out, softmax_lse, the dropout mask, rng_state."""
    _refuse("fwd", alibi_slopes=alibi_slopes, softcap=softcap, gen=gen)
    head_dim = q.shape[-1]
    q, k, v = _padded(q, k, v)
    o, lse, rng, _unused, mask = _FORWARD(
        q, k, v, None, None, q.shape[1], k.shape[1], p_dropout, is_causal, return_softmax,
        scale=softmax_scale, window_size_left=window_size_left, window_size_right=window_size_right,
    )  # fmt: skip
    return _forward_result(out, o, lse, mask, _rng_state(rng, p_dropout), head_dim, q, k, v)


def varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor | None,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    seqused_k: torch.Tensor | None,
    leftpad_k: torch.Tensor | None,
    block_table: torch.Tensor | None,
    alibi_slopes: torch.Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    p_dropout: float,
    softmax_scale: float,
    zero_tensors: bool,
    is_causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    return_softmax: bool,
    gen: Any,
) -> list[torch.Tensor]:
    """Attention of packed sequences (q, k, v [tokens, heads, head dim], bounded by `cu_seqlens_*`): out,
    softmax_lse, the dropout mask, rng_state."""
    _refuse(
        "varlen_fwd", alibi_slopes=alibi_slopes, softcap=softcap, gen=gen, leftpad_k=leftpad_k,
        block_table=block_table, zero_tensors=zero_tensors,
    )  # fmt: skip
    head_dim = q.shape[-1]
    q, k, v = _padded(q, k, v)
    o, lse, rng, _unused, mask = _FORWARD(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, p_dropout, is_causal, return_softmax,
        scale=softmax_scale, window_size_left=window_size_left, window_size_right=window_size_right,
        seqused_k=seqused_k,
    )  # fmt: skip
    return _forward_result(out, o, lse, mask, _rng_state(rng, p_dropout), head_dim, q, k, v)


def bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    softmax_lse: torch.Tensor,
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv: torch.Tensor | None,
    alibi_slopes: torch.Tensor | None,
    p_dropout: float,
    softmax_scale: float,
    is_causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    deterministic: bool,
    gen: Any,
    rng_state: torch.Tensor | None,
) -> list[torch.Tensor]:
    """The gradients of `fwd`'s attention, into dq, dk, dv: dq, dk, dv, softmax_d."""
    _refuse("bwd", alibi_slopes=alibi_slopes, softcap=softcap, gen=gen)
    head_dim = dout.shape[-1]
    (dout,) = _padded(dout, width=q.shape[-1])
    grads = _backward(  # dense: no sequence bounds (undefined tensors)
        (dq, dk, dv), deterministic, dout, q, k, v, out, softmax_lse, None, None, q.shape[1], k.shape[1],
        p_dropout, is_causal, *_philox(rng_state, p_dropout, q.device),
        scale=softmax_scale, window_size_left=window_size_left, window_size_right=window_size_right,
    )  # fmt: skip
    batch, seqlen_q, heads = q.shape[:3]
    return [*_unpadded(grads, head_dim), q.new_empty((batch, heads, _round_up(seqlen_q, 128)), dtype=torch.float32)]


def varlen_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    softmax_lse: torch.Tensor,
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv: torch.Tensor | None,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    alibi_slopes: torch.Tensor | None,
    max_seqlen_q: int,
    max_seqlen_k: int,
    p_dropout: float,
    softmax_scale: float,
    zero_tensors: bool,
    is_causal: bool,
    window_size_left: int,
    window_size_right: int,
    softcap: float,
    deterministic: bool,
    gen: Any,
    rng_state: torch.Tensor | None,
) -> list[torch.Tensor]:
    """The gradients of `varlen_fwd`'s attention, into dq, dk, dv: dq, dk, dv, softmax_d."""
    _refuse("varlen_bwd", alibi_slopes=alibi_slopes, softcap=softcap, gen=gen, zero_tensors=zero_tensors)
    head_dim = dout.shape[-1]
    (dout,) = _padded(dout, width=q.shape[-1])
    grads = _backward(
        (dq, dk, dv), deterministic, dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        max_seqlen_k, p_dropout, is_causal, *_philox(rng_state, p_dropout, q.device),
        scale=softmax_scale, window_size_left=window_size_left, window_size_right=window_size_right,
    )  # fmt: skip
    sequences, heads = cu_seqlens_q.numel() - 1, q.shape[1]
    return [*_unpadded(grads, head_dim), q.new_empty((heads, q.shape[0] + 128 * sequences), dtype=torch.float32)]


def _forward_result(
    buffer: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    mask: torch.Tensor,
    rng_state: torch.Tensor,
    head_dim: int,
    *qkv: torch.Tensor,
) -> list[torch.Tensor]:
    """A forward call's results in the installed release's order: out (in the caller's buffer), softmax_lse, the
    dropout mask, rng_state; flash-attn 2.6 also returns q, k, v and the output as its kernel used them, padded to a
    head dimension that is a multiple of 8 (`RETURNS_INPUTS`), and `out` is its view of `head_dim`."""
    if not RETURNS_INPUTS:
        return [_into(buffer, out), lse, mask, rng_state]
    if out.shape[-1] == head_dim:
        return [_into(buffer, out), *qkv, out, lse, mask, rng_state]
    unpadded = out[..., :head_dim]  # a caller's buffer gets a copy of it, as 2.6's extension makes
    return [unpadded if buffer is None else buffer.copy_(unpadded), *qkv, out, lse, mask, rng_state]


_called = traced_call(RANGE, opaque=RETURNS_INPUTS)
"""A call of the extension in a trace range of its name (`RANGE`), which the prediction's notes count; in 2.6,
which calls its extension inside autograd functions Dynamo traces, opaque to torch.compile (a graph break), as
the compiled extension is (2.7 on wrap the calls in custom ops)."""

fwd, varlen_fwd, bwd, varlen_bwd = (_called(f) for f in (fwd, varlen_fwd, bwd, varlen_bwd))


def _unsupported(name: str, what: str) -> Callable[..., Any]:
    """A function of the extension this stand-in does not implement: calling it fails, naming it."""

    def call(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"flash_attn_2_cuda.{name} ({what}) is not implemented by Maya's stand-in for flash-attn's extension, "
            "which runs torch's FlashAttention-2 port"
        )

    call.__name__ = name
    return call


fwd_kvcache = _unsupported("fwd_kvcache", "attention over a KV cache, for inference")


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"flash_attn_2_cuda.{name} is not implemented by Maya's stand-in for flash-attn's extension (it implements "
        "fwd, varlen_fwd, bwd and varlen_bwd)"
    )


def _refuse(call: str, **options: Any) -> None:
    """Fail loudly, naming the option, where flash-attn's kernel would do what torch's port cannot."""
    asked = {
        "alibi_slopes": "ALiBi slopes (torch's port has none in its backward)",
        "softcap": "soft-capping of the attention scores",
        "gen": "a random generator of its own for dropout",
        "leftpad_k": "left-padded keys",
        "block_table": "a paged KV cache",
        "zero_tensors": "zeroing the outputs first",
    }
    for name, value in options.items():
        if isinstance(value, torch.Tensor) or value not in (None, False, 0.0):
            raise NotImplementedError(
                f"flash_attn_2_cuda.{call} with {asked[name]} ({name}) is not implemented by Maya's stand-in for "
                "flash-attn's extension, which runs torch's FlashAttention-2 port"
            )


def _padded(*tensors: torch.Tensor, width: int | None = None) -> tuple[torch.Tensor, ...]:
    """flash-attn 2.6's padding in its extension: the tensors' last dimension zero-padded to `width` (default: the
    next multiple of 8), as its kernel reads them; 2.7 on pad in their Python code, so this leaves them as given."""
    head_dim = tensors[0].shape[-1]
    wanted = width if width is not None else -(-head_dim // 8) * 8
    if not RETURNS_INPUTS or wanted == head_dim:
        return tensors
    return tuple(torch.nn.functional.pad(t, (0, wanted - t.shape[-1])) for t in tensors)


def _unpadded(grads: list[torch.Tensor], head_dim: int) -> list[torch.Tensor]:
    """Gradients returned as 2.6's extension returns them: views of the caller's padded buffers at `head_dim`."""
    return [g if g.shape[-1] == head_dim else g[..., :head_dim] for g in grads]


def _into(buffer: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    """`value` in the caller's buffer (None: its own tensor), as flash-attn's kernel writes it: a buffer that alone
    holds its memory (`_own`) takes the value's storage, any other gets a copy."""
    if buffer is None:
        return value
    return buffer.set_(value) if _own(buffer) else buffer.copy_(value)


def _backward(
    buffers: tuple[torch.Tensor | None, ...], deterministic: bool, *args: Any, **kwargs: Any
) -> list[torch.Tensor]:
    """torch's backward kernel, its gradients in the caller's buffers (`_into`). The buffers that alone hold their
    memory give it back first, so torch's gradients can take it (the package's peak); emptied, they still do."""
    for buffer in buffers:
        if _own(buffer):
            buffer.set_(buffer.new_empty(0))
    with _deterministic(deterministic):
        grads = _BACKWARD(*args, **kwargs)
    return [_into(buffer, grad) for buffer, grad in zip(buffers, grads)]


@contextlib.contextmanager
def _deterministic(wanted: bool) -> Iterator[None]:
    """flash-attn's `deterministic` for one call: torch's port reads torch's process-wide switch, which is set for
    the call alone, without the filling of new memory that comes with it (kernels flash-attn does not launch)."""
    previous = torch.are_deterministic_algorithms_enabled()
    if wanted == previous:
        yield
        return
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(wanted, warn_only=warn_only)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def _own(buffer: torch.Tensor | None) -> bool:
    """Whether a caller's buffer alone holds its memory (no view, alias or reinterpretation of it shares the storage),
    so it can take a result's storage in place of its own."""
    if buffer is None or buffer._base is not None or buffer.storage_offset() != 0:
        return False
    storage = buffer.untyped_storage()
    whole = storage.nbytes() == buffer.numel() * buffer.element_size()
    return whole and torch._C._storage_Use_Count(storage._cdata) <= 2  # this tensor's and `storage`'s references


def _rng_state(rng: torch.Tensor, p_dropout: float) -> torch.Tensor:
    """flash-attn's `rng_state` (int64, its ops' declared type) from torch's dropout state: torch's first tensor holds
    the seed and offset (its second is unused); a torch that keeps them apart cannot be given back as one."""
    if p_dropout > 0 and rng.numel() != 2:
        raise NotImplementedError(
            "flash_attn_2_cuda: dropout needs torch's dropout state in one tensor (seed and offset); this torch "
            f"({torch.__version__}) keeps them apart"
        )
    return rng.view(torch.int64) if rng.dtype == torch.uint64 else rng


def _philox(rng_state: torch.Tensor | None, p_dropout: float, device: torch.device) -> tuple:
    """torch's two dropout arguments of its backward from flash-attn's `rng_state`."""
    unused = torch.empty((), dtype=torch.uint64, device=device)
    if rng_state is None:
        if p_dropout > 0:
            raise NotImplementedError("flash_attn_2_cuda: a dropout backward needs its forward's rng_state")
        return torch.empty(0, dtype=torch.uint64, device=device), unused
    return (rng_state.view(torch.uint64) if rng_state.dtype == torch.int64 else rng_state), unused


def _round_up(n: int, multiple: int) -> int:
    """`n` rounded up to a multiple of `multiple`."""
    return (n + multiple - 1) // multiple * multiple
