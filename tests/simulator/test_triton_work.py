"""Triton kernels' work from their recorded launch arguments (`api_calls.args.triton`)."""

import json

import numpy as np
import pandas as pd
import pytest

from maya.simulator.trace import RankTrace
from maya.simulator.triton_work import (
    causal_blocks,
    describe,
    document_blocks,
    stand_in_blocks,
    stand_in_documents,
)
from maya.simulator.work import work_frame


def tensor(name, shape, dtype="bfloat16", size=2):
    return {"name": name, "dtype": dtype, "shape": list(shape), "bytes": int(np.prod(shape)) * size}


def scalar(name, value):
    return {"name": name, "value": value}


def note(*args, **constexprs) -> str:
    return json.dumps({"triton": {"args": list(args), "constexprs": constexprs}})


def test_pointwise_counts_xnumel_and_the_bytes_of_its_tensors():
    work = describe(
        "triton_poi_fused_add_gelu_0",
        note(
            tensor("in_out_ptr0", (32, 1024)),
            tensor("in_ptr0", (1024,)),
            tensor("in_ptr1", (32, 1024), "float32", 4),
            scalar("xnumel", 32768),
        ),
    )
    assert work["numel"] == 32768
    assert work["work_bytes"] == 2 * 65536 + 2048 + 131072  # the in-place buffer is read and written
    assert work["dtype"] == "bf16"  # most of the bytes
    assert work["operands"] == 3
    assert (work["family"], work["op"]) == ("elementwise", "inductor_pointwise")
    assert "flops" not in work


def test_a_kernel_compiled_under_inductors_placeholder_name_is_described_by_its_own():
    """torch 2.5 compiles every generated kernel as `triton_`: the launch's recorded Inductor name says its kind."""
    args = (tensor("in_ptr0", (4096, 768)), tensor("out_ptr0", (4096,), "float32", 4))
    scalars = (scalar("xnumel", 4096), scalar("rnumel", 768))
    named = json.dumps({"triton": {"args": [*args, *scalars], "constexprs": {}, "name": "triton_per_fused_sum_0"}})
    work = describe("triton_", named)
    assert (work["family"], work["op"]) == ("reduction", "inductor_persistent_reduction")
    assert (work["numel"], work["row"]) == (4096 * 768, 768)
    unnamed = describe("triton_", note(*args, *scalars))
    assert "family" not in unnamed and unnamed["op"] == "triton"  # the placeholder alone says nothing


def test_two_dimensional_pointwise_multiplies_its_extents():
    work = describe(
        "triton_poi_fused_transpose_1",
        note(tensor("in_ptr0", (64, 512)), tensor("out_ptr0", (512, 64)), scalar("ynumel", 64), scalar("xnumel", 512)),
    )
    assert work["numel"] == 64 * 512


def test_reduction_counts_kept_times_reduced_elements_and_the_row():
    work = describe(
        "triton_red_fused_sum_2",
        note(
            tensor("in_ptr0", (4096, 50304), "float32", 4),
            tensor("out_ptr0", (4096,), "float32", 4),
            scalar("xnumel", 4096),
            scalar("r0_numel", 50304),
        ),
    )
    assert work["numel"] == 4096 * 50304
    assert work["row"] == 50304
    assert work["dtype"] == "fp32"
    assert (work["family"], work["op"]) == ("reduction", "inductor_reduction")


def test_a_gather_counts_the_rows_it_reads_not_its_table():
    """An embedding lookup fused into a pointwise kernel passes the whole table; it reads one row per token."""
    work = describe(
        "triton_poi_fused_add_embedding_0",
        note(
            tensor("in_ptr0", (8, 1024), "int64", 8),
            tensor("in_ptr1", (50304, 768), "float32", 4),
            tensor("in_ptr2", (1024, 768), "float32", 4),
            tensor("out_ptr0", (8, 1024, 768), "float32", 4),
            scalar("xnumel", 8 * 1024 * 768),
        ),
    )
    rows = 8 * 1024 * 768 * 4  # the gathered rows, the output
    assert work["work_bytes"] == 8 * 1024 * 8 + rows + 1024 * 768 * 4 + rows
    assert (work["family"], work["op"]) == ("elementwise", "inductor_pointwise")


@pytest.mark.parametrize(
    ("kernel", "family", "op"),
    [
        ("triton_poi_fused__to_copy_1", "elementwise", "inductor_pointwise"),
        (
            "triton_poi_fused__to_copy__unsafe_view_mul_pow_relu_threshold_backward_view_2",
            "elementwise",
            "inductor_pointwise",
        ),
        ("triton_poi_fused_native_layer_norm_native_layer_norm_backward_3", "elementwise", "inductor_pointwise"),
        ("triton_per_fused_add_native_layer_norm_2", "normalization", "inductor_persistent_reduction"),
        ("triton_red_fused__log_softmax_nll_loss_forward_4", "softmax", "inductor_reduction"),
        ("triton_per_fused_embedding_dense_backward_sum_5", "reduction", "inductor_persistent_reduction"),
    ],
)
def test_generated_kernels_take_the_family_of_what_they_do(kernel, family, op):
    """A pointwise kernel is pointwise whatever its fused ops (a cast too: torch's eager cast is the same vectorized
    kernel); a reduction is the layer norm or softmax its name says, else a reduction."""
    reduced = [scalar("r0_numel", 768)] if "_poi_" not in kernel else []
    work = describe(
        kernel, note(tensor("in_ptr0", (64, 768)), tensor("out_ptr0", (64, 768)), scalar("xnumel", 64), *reduced)
    )
    assert (work["family"], work["op"]) == (family, op)
    assert describe(kernel, note(tensor("in_ptr0", (64, 768)), scalar("xnumel", 64), *reduced), True)["op"] == (
        f"{op}_backward"
    )


@pytest.mark.parametrize("b_shape", [(256, 512), (512, 256)])  # B passed as [K, N] or as the transposed [N, K]
def test_matmul_template_takes_m_n_k_from_its_tensors(b_shape):
    """Sizes in the call frame's (cuBLAS) convention: m = the output's columns, n = its rows, tiles likewise."""
    work = describe(
        "triton_tem_fused_mm_3",
        note(
            tensor("arg_A", (128, 256)),
            tensor("arg_B", b_shape),
            tensor("out_ptr0", (128, 512)),
            BLOCK_M=64,
            BLOCK_N=32,
        ),
    )
    assert (work["family"], work["op"], work["dtype"]) == ("gemm", "mm", "bf16")
    assert (work["batch"], work["m"], work["n"], work["k"]) == (1, 512, 128, 256)
    assert (work["tile_m"], work["tile_n"]) == (32, 64)
    assert work["flops"] == 2 * 128 * 512 * 256


def test_batched_matmul_template_and_tf32():
    work = describe(
        "triton_tem_fused_bmm_4",
        note(
            tensor("arg_A", (8, 64, 32), "float32", 4),
            tensor("arg_B", (8, 32, 16), "float32", 4),
            tensor("out_ptr0", (8, 64, 16), "float32", 4),
            ALLOW_TF32=True,
        ),
    )
    assert (work["op"], work["dtype"], work["batch"], work["m"], work["n"], work["k"]) == ("bmm", "tf32", 8, 16, 64, 32)


def test_convolution_template_is_its_implicit_gemm():
    work = describe(
        "triton_tem_fused_convolution_5",
        note(tensor("arg_X", (2, 16, 32, 32)), tensor("arg_W", (64, 16, 3, 3)), tensor("out_ptr0", (2, 64, 30, 30))),
    )
    assert (work["m"], work["n"], work["k"]) == (64, 2 * 30 * 30, 16 * 9)


def flex_note(
    seq, heads, head_dim, counts=None, backward=False, documents=False, block=128, mask_heads=1, queries=None
):
    """A flex-attention launch over one packed sequence of `seq` tokens: Q/K/V, the BlockMask's count tensors
    ([1, mask_heads, row blocks]) and, where given, the counts the emulator read (`block_counts`). `queries`
    (default `seq`): a context-parallel rank's shard of the queries against the whole sequence's keys."""
    queries = queries or seq
    # Q/K/V in their buffers' layout, [batch, tokens, heads, dim], as Inductor passes a transposed input
    qkv = [tensor(f"arg_{n}", (1, queries if n == "Q" else seq, heads, head_dim)) for n in ("Q", "K", "V")]
    qkv.append(tensor("arg_LSE", (1, heads, queries), "float32", 4))
    rows, columns = -(-queries // block), -(-seq // block)
    masks = [tensor(n, (1, mask_heads, rows), "int32", 4) for n in ("arg_KV_NUM_BLKS", "arg_FULL_KV_NUM_BLKS")]
    masks.append(tensor("arg_KV_IDX", (1, mask_heads, rows, columns), "int32", 4))
    extra = [tensor("arg_DO", (1, heads, seq, head_dim))] if backward else []
    if documents:  # the per-token document ids the mask reads: the whole sequence's (a shape: another layout)
        extra.append(tensor("in_ptr9", (seq,) if documents is True else documents, "int32", 4))
    text = json.loads(note(*qkv, *masks, *extra, SPARSE_Q_BLOCK_SIZE=block, SPARSE_KV_BLOCK_SIZE=block))
    if counts is not None:
        text["triton"]["block_counts"] = counts
    return json.dumps(text)


def test_flex_block_counts_of_causal_and_sliding_window_masks_are_exact():
    # against a token-by-token check of every block pair, masks of every kind and ragged lengths
    rng = np.random.default_rng(0)
    for trial in range(60):
        seq, q_block, kv_block = int(rng.integers(1, 200)), int(rng.choice([16, 32])), int(rng.choice([16, 64]))
        docs = np.repeat(np.arange(40), rng.integers(1, 50, 40))[:seq]
        window = int(rng.integers(1, 90)) if trial % 2 else None
        q, k = np.arange(seq)[:, None], np.arange(seq)[None, :]
        allowed = (q >= k) & (docs[:, None] == docs[None, :]) & ((q - k < window) if window else True)
        blocks = sum(
            allowed[i : i + q_block, j : j + kv_block].any()
            for i in range(0, seq, q_block)
            for j in range(0, seq, kv_block)
        )
        assert document_blocks(docs, seq, seq, q_block, kv_block, window) == blocks
    # closed forms: causal n(n+1)/2 blocks of n per side; a window of w blocks: min(i + 1, w + 1) in row i
    assert causal_blocks(8192, 8192, 128, 128) == 64 * 65 // 2
    assert causal_blocks(8192, 8192, 128, 128, window=1024) == sum(min(i + 1, 8 + 1) for i in range(64))


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("window", [None, 1024])
def test_flex_template_flops_count_the_blocks_its_mask_computes(backward, window):
    seq, heads, d = 8192, 6, 128
    per_head = causal_blocks(seq, seq, 128, 128, window)
    # what the emulator reads from a mask built outside torch.compile: the counts of every row (partial + full)
    counts = {"arg_KV_NUM_BLKS": 64, "arg_FULL_KV_NUM_BLKS": per_head - 64}
    work = describe("triton_tem_fused_flex_attention", flex_note(seq, heads, d, counts, backward))
    assert (work["family"], work["op"], work["mask"]) == (
        "attention",
        "flex_bwd" if backward else "flex_fwd",
        "counted",
    )
    assert (work["batch"], work["m"], work["k"]) == (heads, seq, d)  # from the log-sum-exp, not Q's buffer layout
    analytical = 4 * heads * per_head * 128 * 128 * d * (2.5 if backward else 1.0)
    assert work["flops"] == pytest.approx(analytical)
    assert work["flops"] < 4 * heads * seq * seq * d * (2.5 if backward else 1.0) * (0.55 if window is None else 0.15)


def test_flex_mask_the_trace_cannot_give_is_a_stated_stand_in():
    seq, heads, d = 65536, 6, 128
    causal = describe("triton_tem_fused_flex_attention", flex_note(seq, heads, d))
    assert causal["mask"] == "causal stand-in"
    assert causal["flops"] == pytest.approx(4 * heads * (512 * 513 // 2) * 128 * 128 * d)
    documents = describe("triton_tem_fused_flex_attention", flex_note(seq, heads, d, documents=True))
    assert documents["mask"] == "document-causal stand-in"
    # documents of ~700 tokens keep a query block to a few key blocks: far under the causal count
    assert documents["flops"] < causal["flops"] / 20
    assert documents["n"] == pytest.approx(stand_in_blocks(seq, seq, 128, 128, True) * 128 * 128 / seq)
    # torchtitan's ids are one row per sequence of the batch ([batch, tokens]); another integer tensor is not ids
    batched = describe("triton_tem_fused_flex_attention", flex_note(seq, heads, d, documents=(1, seq)))
    assert batched["mask"] == "document-causal stand-in" and batched["flops"] == documents["flops"]
    other = describe("triton_tem_fused_flex_attention", flex_note(seq, heads, d, documents=(3, seq)))
    assert other["mask"] == "causal stand-in" and other["flops"] == causal["flops"]


def head_tail_blocks(documents, ranks, rank, block):
    """Blocks a context-parallel rank's flex launch computes, token by token: torch's head-tail balancer gives
    rank `r` of `R` the sequence's chunks `r` and `2R - 1 - r` of `2R` as its queries, against every key."""
    seq = len(documents)
    chunk = seq // (2 * ranks)
    rows = np.r_[rank * chunk : (rank + 1) * chunk, (2 * ranks - 1 - rank) * chunk : (2 * ranks - rank) * chunk]
    q, k = rows[:, None], np.arange(seq)[None, :]
    allowed = (q >= k) & (documents[rows][:, None] == documents[None, :])
    return sum(
        allowed[i : i + block, j : j + block].any() for i in range(0, len(rows), block) for j in range(0, seq, block)
    )


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("backward", [False, True])
def test_a_context_parallel_ranks_flex_launch_is_priced_at_its_share_of_the_mask(ranks, backward):
    """A CP rank's queries (a shard) against the all-gathered keys: the stand-in mask is its load-balanced share of
    the whole sequence's blocks, not a sequence of the shard's length (which priced 36 of 2,048 tokens' 136 causal
    blocks for each of 2 ranks, where each computes 68)."""
    seq, heads, d, block = 2048, 16, 16, 128
    shard = seq // ranks
    causal = describe(
        "triton_tem_fused_flex_attention", flex_note(seq, heads, d, backward=backward, queries=shard, block=block)
    )
    assert (causal["mask"], causal["m"], causal["batch"]) == ("causal stand-in", shard, heads)
    exact = [head_tail_blocks(np.zeros(seq, dtype=int), ranks, r, block) for r in range(ranks)]
    assert len(set(exact)) == 1  # head-tail balances a causal mask exactly
    assert causal["n"] * shard == pytest.approx(exact[0] * block * block)  # keys a query computes, on average
    assert causal["flops"] == pytest.approx(4 * heads * exact[0] * block * block * d * (2.5 if backward else 1.0))
    # a document mask reads the whole sequence's ids under CP: its stand-in is the shards' mean share
    documents = describe(
        "triton_tem_fused_flex_attention", flex_note(seq, heads, d, documents=True, queries=shard, block=block)
    )
    assert documents["mask"] == "document-causal stand-in"
    ids = stand_in_documents(seq)
    shares = [head_tail_blocks(ids, ranks, r, block) for r in range(ranks)]
    assert documents["n"] * shard * ranks == pytest.approx(sum(shares) * block * block)
    assert sum(shares) == stand_in_blocks(seq, seq, block, block, True)


def test_user_kernels():
    matmul = describe(
        "matmul_kernel",
        note(
            tensor("a_ptr", (64, 32)),
            tensor("b_ptr", (32, 16)),
            tensor("c_ptr", (64, 16)),
            scalar("M", 64),
            scalar("N", 16),
            scalar("K", 32),
            BLOCK_SIZE_M=32,
        ),
    )
    assert (matmul["family"], matmul["m"], matmul["n"], matmul["k"]) == ("gemm", 16, 64, 32)
    add = describe(
        "add_kernel",
        note(
            tensor("x_ptr", (1000,)),
            tensor("y_ptr", (10,)),
            tensor("out", (1000,)),
            scalar("n", 1000),
            scalar("alpha", 0.5),
            BLOCK=128,
        ),
    )
    assert add["numel"] == 1000 and add["work_bytes"] == 2 * 2010
    assert (add["family"], add["op"], add["operands"]) == ("elementwise", "inductor_pointwise", 3)  # the add's price


def test_a_user_row_kernel_is_its_family_over_rows_of_its_last_dimension():
    """Liger's RMSNorm: one program per row of `n_cols`, priced as torch's layer norm of the same rows, not as one row
    of all the elements; in a backward pass as the backward kernel."""
    x, y = tensor("X_ptr", (4096, 1024), "float32", 4), tensor("Y_ptr", (4096, 1024), "float32", 4)
    args = (dict(y, access="write"), dict(x, access="read"), scalar("n_cols", 1024))
    forward = describe("_rms_norm_forward_kernel", note(*args))
    assert (forward["family"], forward["op"], forward["numel"], forward["row"]) == (
        "normalization",
        "inductor_reduction",
        4096 * 1024,
        1024,
    )
    assert describe("_rms_norm_backward_kernel", note(*args), backward=True)["op"] == "inductor_reduction_backward"
    flash = describe("_flash_attn_fwd", note(tensor("Q", (2, 8, 128, 64)), tensor("Out", (2, 8, 128, 64))))
    assert "family" not in flash and flash["op"] == "triton"  # its name's family (attention) and bytes, as before


def test_work_frame_prices_triton_launches_from_their_arguments_not_the_enclosing_op():
    kernels = pd.DataFrame(
        {
            "kernel_id": [0, 1],
            "name": ["triton_poi_fused_gelu_0", "triton_tem_fused_mm_1"],
            "family": ["elementwise", "other"],
        }
    )
    calls = pd.DataFrame(
        {
            "kernel_id": [0, 1, 0, 0],
            "op_id": [7, 7, 7, 8],
            "api": ["cuLaunchKernel"] * 4,
            "args": [
                note(tensor("in_ptr0", (8, 8)), tensor("out_ptr0", (8, 8)), scalar("xnumel", 64)),
                note(tensor("arg_A", (8, 4)), tensor("arg_B", (4, 8)), tensor("out_ptr0", (8, 8))),
                None,
                note(tensor("in_ptr0", (8, 8)), tensor("out_ptr0", (8, 8)), scalar("xnumel", 64)),
            ],
        }
    )
    for column in (
        "gemm_m",
        "gemm_n",
        "gemm_k",
        "gemm_batch",
        "bytes",
        "memcpy_kind",
        "gemm_dtype_a",
        "gemm_compute_type",
        "collective_name",
        "in_msg_nelems",
        "out_msg_nelems",
        "comm_dtype",
    ):
        calls[column] = None
    ops = pd.DataFrame(
        {
            "op_id": [7, 8],
            "name": ["CompiledFunction", "CompiledFunctionBackward"],
            "input_shapes": [[[1000, 1000]], [[1000, 1000]]],
            "input_dtypes": [["float"], ["float"]],
        }
    )
    trace = RankTrace(0, calls, ops, kernels, pd.DataFrame(), pd.DataFrame())
    frame = work_frame(trace, np.zeros(len(calls), dtype=np.int64))
    assert frame.loc[0, "numel"] == 64 and frame.loc[0, "work_bytes"] == 256
    assert (frame.loc[1, "family"], frame.loc[1, "flops"]) == ("gemm", 2 * 8 * 8 * 4)
    assert frame.loc[2, "numel"] == 1e6  # an undescribed launch keeps the enclosing op's shapes
    # the same generated kernel in the compiled backward is a backward pass's
    assert frame["op"].tolist()[::3] == ["inductor_pointwise", "inductor_pointwise_backward"]


def test_work_frame_describes_each_distinct_launch_once_as_it_would_each_launch():
    """Launches keyed by codes (kernel name, argument text, backward op) get what `describe` gives each launch on its
    own: the same arguments under two kernels, and the same kernel under a forward and a backward op, stay apart."""
    kernels = pd.DataFrame(
        {
            "kernel_id": [0, 1],
            "name": ["triton_poi_fused_gelu_0", "triton_red_fused_sum_1"],
            "family": ["elementwise", "reduction"],
        }
    )
    small = note(tensor("in_ptr0", (8, 8)), tensor("out_ptr0", (8, 8)), scalar("xnumel", 64))
    large = note(tensor("in_ptr0", (64, 32)), tensor("out_ptr0", (64,)), scalar("xnumel", 64), scalar("rnumel", 32))
    pattern = [(0, small, 7), (1, small, 7), (0, small, 8), (1, large, 8), (0, large, 7), (1, large, 7)]
    kernel_id, args, op_id = (list(column) for column in zip(*(pattern * 4)))
    calls = pd.DataFrame({"kernel_id": kernel_id, "op_id": op_id, "api": ["cuLaunchKernel"] * len(kernel_id)})
    calls["args"] = pd.Series(args, dtype="str")
    for column in ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "bytes", "memcpy_kind", "gemm_dtype_a"):
        calls[column] = None
    for column in ("gemm_compute_type", "collective_name", "in_msg_nelems", "out_msg_nelems", "comm_dtype"):
        calls[column] = None
    ops = pd.DataFrame(
        {
            "op_id": [7, 8],
            "name": ["CompiledFunction", "CompiledFunctionBackward"],
            "input_shapes": [[[8, 8]], [[8, 8]]],
            "input_dtypes": [["float"], ["float"]],
        }
    )
    trace = RankTrace(0, calls, ops, kernels, pd.DataFrame(), pd.DataFrame())
    frame = work_frame(trace, np.zeros(len(calls), dtype=np.int64))
    names = kernels.set_index("kernel_id")["name"]
    for i, (kernel, text, op) in enumerate(zip(kernel_id, args, op_id)):
        work = describe(names[kernel], text, op == 8)
        assert frame.loc[i, "op"] == work["op"]
        for column in ("numel", "work_bytes", "operands"):
            assert frame.loc[i, column] == work[column]
    assert len({tuple(frame.loc[i, ["op", "numel", "work_bytes"]]) for i in range(6)}) == 6


def test_a_triton_launch_of_a_kernel_with_a_null_name_is_an_error_naming_the_call():
    """A null name (the spec writes '' for an unnamed kernel) is refused, not described as another kernel's."""
    kernels = pd.DataFrame(
        {"kernel_id": [0, 1], "name": ["triton_poi_fused_gelu_0", None], "family": ["elementwise", "reduction"]}
    )
    args = [
        note(tensor("in_ptr0", (8, 8)), tensor("out_ptr0", (8, 8)), scalar("xnumel", 64)),
        note(tensor("in_ptr0", (64, 32)), tensor("out_ptr0", (64,)), scalar("xnumel", 64), scalar("rnumel", 32)),
    ]
    calls = pd.DataFrame({"seq": [10, 11], "kernel_id": [0, 1], "op_id": [7, 7], "api": ["cuLaunchKernel"] * 2})
    calls["args"] = args
    for column in ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "bytes", "memcpy_kind", "gemm_dtype_a"):
        calls[column] = None
    for column in ("gemm_compute_type", "collective_name", "in_msg_nelems", "out_msg_nelems", "comm_dtype"):
        calls[column] = None
    ops = pd.DataFrame(
        {"op_id": [7], "name": ["CompiledFunction"], "input_shapes": [[[8, 8]]], "input_dtypes": [["float"]]}
    )
    trace = RankTrace(0, calls, ops, kernels, pd.DataFrame(), pd.DataFrame())
    with pytest.raises(ValueError, match="call 11 has a null kernel name"):
        work_frame(trace, np.zeros(len(calls), dtype=np.int64))


def test_notes_count_every_stand_in_launch_and_read_once_described_per_distinct_text():
    """The flex-mask and host-read notes count launches and reads call by call (repeated texts included) while each
    distinct text is described once; known reads (`stand_in: computed`) and calls without arguments are not stand-ins."""
    from pathlib import Path

    from maya.simulator.notes import flex_mask_notes, stand_in_notes
    from maya.simulator.trace import TraceSet

    causal, documents = flex_note(65536, 6, 128), flex_note(65536, 6, 128, documents=True)
    known = json.dumps({"stand_in": "computed"})
    calls = pd.DataFrame(
        {
            "api": ["cuLaunchKernel"] * 5 + ["aten_read"] * 4,
            "op_id": [1, 1, 1, 1, 1, 2, 2, 3, 2],
            "args": pd.Series([causal, documents, causal, None, causal, known, None, "{}", "{}"], dtype="str"),
            "data_dependent": [False] * 5 + [True] * 4,
        }
    )
    ops = pd.DataFrame({"op_id": [1, 2, 3], "name": ["flex", "aten::nonzero", "aten::item"]})
    traces = TraceSet("r", Path("."), {}, {0: RankTrace(0, calls, ops, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())})
    (flex,) = flex_mask_notes(traces)
    assert "in 4 launches (3 as a causal stand-in, 1 as a document-causal stand-in)" in flex
    (reads,) = stand_in_notes(traces)
    assert reads.startswith("3 host reads of device values got emulated stand-ins (aten::nonzero 2, aten::item 1)")


def test_a_tensor_the_kernel_reads_and_writes_moves_twice():
    """The access the emulator read from a user kernel's source (`triton_access`): Liger's RoPE rotates q in place."""
    q = tensor("q_ptr", (4, 1024, 16, 64))
    described = describe(
        "_triton_rope",
        note(dict(q, access="read-write"), dict(tensor("cos", (1, 1024, 64)), access="read"), scalar("sl", 1024)),
    )
    assert described["work_bytes"] == 2 * q["bytes"] + 1024 * 64 * 2
    unknown = describe("_triton_rope", note(q, tensor("cos", (1, 1024, 64)), scalar("sl", 1024)))
    assert unknown["work_bytes"] == q["bytes"] + 1024 * 64 * 2  # no access recorded: once each, as before


def test_the_note_names_the_user_kernels_and_how_they_were_priced():
    """Liger's kernels, launch by launch; Inductor's generated kernels and GEMM-shaped user kernels are not in it."""
    from pathlib import Path

    from maya.simulator.notes import triton_user_notes
    from maya.simulator.trace import TraceSet

    rows = note(
        dict(tensor("X_ptr", (4096, 1024)), access="read"),
        dict(tensor("Y_ptr", (4096, 1024)), access="write"),
        scalar("n_cols", 1024),
    )
    pointwise = note(tensor("a_ptr", (4096, 2816)), tensor("c_ptr", (4096, 2816)))
    gemm = note(tensor("a_ptr", (64, 32)), scalar("M", 64), scalar("N", 16), scalar("K", 32))
    calls = pd.DataFrame(
        {
            "api": ["cuLaunchKernel"] * 6,
            "kernel_id": [1, 1, 2, 2, 3, 4],
            "args": pd.Series([rows, rows, pointwise, pointwise, gemm, pointwise], dtype="str"),
        }
    )
    kernels = pd.DataFrame(
        {
            "kernel_id": [1, 2, 3, 4],
            "name": ["_rms_norm_forward_kernel", "_swiglu_forward_kernel", "mm", "triton_poi_0"],
        }
    )
    traces = TraceSet(
        "r", Path("."), {}, {0: RankTrace(0, calls, pd.DataFrame(), kernels, pd.DataFrame(), pd.DataFrame())}
    )
    (user,) = triton_user_notes(traces)
    assert user.startswith("4 launches of user Triton kernels")
    assert "layer norm over their rows (2: _rms_norm_forward_kernel)" in user
    assert "add moving their bytes (2: _swiglu_forward_kernel)" in user
    assert user.endswith(
        "; 2 of them have no recorded access (a trace before spec 1.6, or a source not read): their "
        "in-place writes counted once"
    )  # SwiGLU's, as in a trace of spec 1.5


def test_inductors_kernels_are_priced_by_their_arguments_names_whatever_access_they_carry():
    """An `access` on Inductor's kernel (a launch through Triton's own launcher) changes nothing: its atomic_add scatter
    output and an `in_out_ptr` it only stores are priced as without it, by their names."""
    scatter = (
        tensor("in_ptr0", (8192,), "int64", 8),
        tensor("in_ptr1", (8192, 768), "float32", 4),
        tensor("out_ptr0", (50304, 768), "float32", 4),
    )
    accesses = {"in_ptr0": "read", "in_ptr1": "read", "out_ptr0": "read-write"}
    per = (
        tensor("in_out_ptr0", (4096, 1), "float32", 4),
        tensor("in_ptr0", (4096, 1024), "float32", 4),
        tensor("out_ptr0", (4096, 1024), "float32", 4),
    )
    stored = {"in_out_ptr0": "write", "in_ptr0": "read", "out_ptr0": "write"}
    for kernel, tensors, access, scalars in (
        ("triton_poi_fused_embedding_dense_backward_1", scatter, accesses, (scalar("xnumel", 8192 * 768),)),
        ("triton_per_fused_native_layer_norm_0", per, stored, (scalar("xnumel", 4096), scalar("r0_numel", 1024))),
    ):
        plain = describe(kernel, note(*tensors, *scalars), backward=True)
        carried = describe(kernel, note(*(dict(t, access=access[t["name"]]) for t in tensors), *scalars), backward=True)
        assert carried == plain
    assert describe(
        "triton_per_fused_native_layer_norm_0", note(*per, scalar("xnumel", 4096), scalar("r0_numel", 1024))
    )["work_bytes"] == (2 * 4096 * 4 + 2 * 4096 * 1024 * 4)  # the in_out_ptr twice, as on main


def test_a_gemm_like_user_kernel_keeps_its_price_and_is_noted():
    """Liger's fused SwiGLU (TMA descriptors, tl.dot, no M/N/K): not the add moving its bytes, as before the user
    kernels were; the note says its FLOPs are not counted."""
    from pathlib import Path

    from maya.simulator.notes import triton_user_notes
    from maya.simulator.trace import TraceSet

    args = [tensor("desc_input", (1, 4096, 1024)), tensor("desc_Wg", (2816, 1024)), tensor("desc_A", (1, 4096, 2816))]
    gemm_like = json.dumps({"triton": {"args": args, "constexprs": {}, "dot": True}})
    work = describe("_swiglu_kernel_forward", gemm_like)
    assert "family" not in work and work["op"] == "triton"  # main's price: its name's family and its bytes
    assert work["work_bytes"] == sum(t["bytes"] for t in args)
    assert describe("_swiglu_kernel_forward", note(*args))["op"] == "inductor_pointwise"  # without `dot`
    calls = pd.DataFrame({"api": ["cuLaunchKernel"] * 3, "kernel_id": [1, 1, 1], "args": [gemm_like] * 3})
    kernels = pd.DataFrame({"kernel_id": [1], "name": ["_swiglu_kernel_forward"]})
    traces = TraceSet(
        "r", Path("."), {}, {0: RankTrace(0, calls, pd.DataFrame(), kernels, pd.DataFrame(), pd.DataFrame())}
    )
    (gemm,) = triton_user_notes(traces)
    assert gemm.startswith("3 launches of GEMM-like user Triton kernels (their source calls tl.dot; _swiglu_kernel")
    assert gemm.endswith("their FLOPs are not counted")


def test_an_access_value_of_no_meaning_is_not_used():
    q = tensor("q_ptr", (4, 1024, 16, 64))
    odd = describe("_triton_rope", note(dict(q, access="modify"), scalar("sl", 1024)))
    assert odd["work_bytes"] == describe("_triton_rope", note(q, scalar("sl", 1024)))["work_bytes"] == q["bytes"]
