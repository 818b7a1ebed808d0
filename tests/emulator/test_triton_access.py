"""Which pointer arguments a `@triton.jit` kernel reads and writes, from its source (`triton_access`): in place
(Liger's RoPE, SwiGLU backward and cross-entropy write over what they read), through a loaded index, a block pointer,
an atomic and a helper."""

import pytest

from maya.emulator.triton_access import argument_access

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def rotate_in_place(q_ptr, cos_ptr, out_ptr, stride, BLOCK: tl.constexpr):
    q_ptr += tl.program_id(0) * stride
    offsets = tl.arange(0, BLOCK)
    q = tl.load(q_ptr + offsets)
    tl.store(q_ptr + offsets, q * tl.load(cos_ptr + offsets))


@triton.jit
def gradient_at_label(X_ptr, Y_ptr, loss_ptr, unused_ptr, n_cols, BLOCK: tl.constexpr):
    y = tl.load(Y_ptr)  # a loaded value is data: X_ptr + y addresses X alone
    x = tl.load(X_ptr + tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < n_cols)
    tl.store(X_ptr + y, tl.sum(x, axis=0))
    tl.store(pointer=loss_ptr, value=tl.max(x, axis=0))


@triton.jit
def block_pointer_copy(src, dst, n, BLOCK: tl.constexpr):
    block = tl.make_block_ptr(base=dst, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))
    block.store(tl.load(src + tl.arange(0, BLOCK)))


@triton.jit
def _store_scaled(ptr, value):
    tl.store(ptr, value * 2)


@triton.jit
def histogram_through_a_helper(keys_ptr, counts_ptr, out_ptr, BLOCK: tl.constexpr):
    keys = tl.load(keys_ptr + tl.arange(0, BLOCK))
    tl.atomic_add(counts_ptr + keys, 1)
    _store_scaled(out_ptr + tl.arange(0, BLOCK), keys)


def test_an_argument_loaded_and_stored_is_read_write():
    access = argument_access(rotate_in_place)
    assert (access["q_ptr"], access["cos_ptr"]) == ("read-write", "read")
    assert "out_ptr" not in access  # no load or store reaches it


def test_a_loaded_index_does_not_make_its_tensor_written():
    access = argument_access(gradient_at_label)
    assert (access["X_ptr"], access["Y_ptr"], access["loss_ptr"]) == ("read-write", "read", "write")
    assert "unused_ptr" not in access


def test_block_pointers_atomics_and_helpers():
    assert (argument_access(block_pointer_copy)["src"], argument_access(block_pointer_copy)["dst"]) == ("read", "write")
    access = argument_access(histogram_through_a_helper)
    assert (access["keys_ptr"], access["counts_ptr"], access["out_ptr"]) == ("read", "read-write", "write")


def test_a_source_that_cannot_be_read_has_no_access():
    class NoSource:
        src = None

    assert argument_access(NoSource()) == {}


@triton.jit
def copy_through_one_name(X, Y, Z, flag, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    p = X + o
    x = tl.load(p)
    p = Y + o  # assigned again: p holds Y's addresses alone from here
    tl.store(p, x)
    if flag:
        q = X + o
    else:
        q = Z + o
    tl.store(q, x)  # X or Z: which one the source does not say


@triton.jit
def _two_pointers(A, B, offsets):
    return A + offsets, B + offsets


@triton.jit
def copy_through_a_tuple(A, B, C, BLOCK: tl.constexpr):
    a_ptrs, b_ptrs = _two_pointers(A, B, tl.arange(0, BLOCK))
    tl.store(b_ptrs, tl.load(a_ptrs))
    c_ptrs, c_mask = C + tl.arange(0, BLOCK), tl.arange(0, BLOCK) < BLOCK
    tl.store(c_ptrs, tl.load(c_ptrs, mask=c_mask), mask=c_mask)


def test_a_name_assigned_again_holds_its_new_arguments_and_a_branch_either():
    access = argument_access(copy_through_one_name)
    assert access["Y"] == "write"  # not read, though p was X's when loaded
    assert "X" not in access and "Z" not in access  # maybe stored after the if: unknown (once each), not guessed


def test_names_unpacked_from_a_call_several_arguments_reach_are_unknown():
    access = argument_access(copy_through_a_tuple)
    assert "A" not in access and "B" not in access  # either pointer may be either: counted once, as without access
    assert access["C"] == "read-write"  # a literal tuple binds element by element


@triton.jit
def _tile_product(a, b):
    return tl.dot(a, b)


@triton.jit
def fused_gate(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    tl.store(c_ptr + o, _tile_product(tl.load(a_ptr + o), tl.load(b_ptr + o)))


def test_a_kernel_calling_a_dot_itself_or_in_a_helper_is_gemm_like():
    from maya.emulator.triton_access import analyse

    access, dot = analyse(fused_gate)
    assert (access["a_ptr"], access["b_ptr"], access["c_ptr"], dot) == ("read", "read", "write", True)
    assert analyse(rotate_in_place)[1] is False


T = tl  # `import triton.language as T`: a name the kernel's module binds to Triton's language


@triton.jit
def through_an_alias(X, Y, stride, BLOCK: tl.constexpr):
    X += tl.program_id(0) * stride
    o = tl.arange(0, BLOCK)
    T.store(Y + o, T.load(X + o, mask=o < BLOCK))


def test_aliases_constexprs_strides_and_unparsable_sources():
    access = argument_access(through_an_alias)
    assert access == {"X": "read", "Y": "write"}  # no stride, no constexpr: they are no pointers
    assert _store_scaled._maya_walks  # a helper's walk is kept: walked once per depth, not per call site

    class Broken:
        src = "def kernel(x_ptr:\n    tl.store(x_ptr, 1)\n"

    assert argument_access(Broken()) == {}  # no exception: the kernel is described without access
