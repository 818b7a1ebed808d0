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
