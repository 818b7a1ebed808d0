"""The prediction's notes on calls Maya's stand-ins for CUDA extensions answered (flash-attn's, grouped_gemm's)."""

from types import SimpleNamespace

import pandas as pd

from maya.simulator.notes import flash_attn_notes, grouped_gemm_notes, megablocks_notes


def _traces(*ops: list[tuple[int, int | None, str]]) -> SimpleNamespace:
    """Ranks whose ops are (op_id, parent_op_id, name) rows."""
    frames = [pd.DataFrame(rows, columns=["op_id", "parent_op_id", "name"]) for rows in ops]
    return SimpleNamespace(ranks={rank: SimpleNamespace(ops=frame) for rank, frame in enumerate(frames)})


def test_flash_attn_calls_are_found_by_the_stand_ins_ranges_wherever_they_run():
    """The stand-in names each call (2.6's from its autograd functions, 2.8's from its custom ops, compiled or not):
    torch's port inside is a call, a copy inside is a gradient into a view, `varlen_*` a variable-length call."""
    rank = [
        (1, None, "FlashAttnVarlenKVPackedFunc"),
        (2, 1, "flash_attn_2_cuda::varlen_fwd"),
        (3, 2, "aten::_flash_attention_forward"),
        (4, None, "FlashAttnVarlenKVPackedFuncBackward"),
        (5, 4, "flash_attn_2_cuda::varlen_bwd"),
        (6, 5, "aten::_flash_attention_backward"),
        (7, 5, "aten::copy_"),
        (8, 5, "aten::copy_"),
        (9, None, "Torch-Compiled Region"),  # a compiled script's call, after Dynamo's graph break
        (10, 9, "flash_attn_2_cuda::fwd"),
        (11, 10, "aten::_flash_attention_forward"),
        (12, None, "aten::_flash_attention_forward"),  # SDPA's own call: not flash-attn's
        (13, None, "FlashAttnFunc"),
        (14, 13, "aten::copy_"),  # a copy outside the extension's call
    ]
    (note,) = flash_attn_notes(_traces(rank, rank))
    assert note.startswith("6 flash-attn call(s) ran on Maya's stand-in")
    assert "; 4 gradient(s) into buffers that share their memory" in note
    assert "; 4 variable-length call(s) are priced at their sequences' mean length" in note


def test_flash_attn_calls_in_traces_before_the_ranges_are_found_by_its_custom_ops_and_none_is_no_note():
    rank = [(1, None, "flash_attn::_flash_attn_forward"), (2, 1, "aten::_flash_attention_forward")]
    (note,) = flash_attn_notes(_traces(rank))
    assert note.startswith("1 flash-attn call(s)") and "variable-length" not in note and "share" not in note
    assert flash_attn_notes(_traces([(1, None, "aten::_flash_attention_forward")])) == []


def test_grouped_gemm_calls_are_counted_by_call_over_the_ranks():
    rank = [(1, None, "grouped_gemm::gmm"), (2, 1, "aten::mm"), (3, None, "grouped_gemm::gmm")]
    (note,) = grouped_gemm_notes(_traces(rank, [*rank, (4, None, "grouped_gemm::permute")]))
    assert note.startswith("5 grouped_gemm call(s) (gmm 4, permute 1) ran on Maya's stand-in")
    assert "one cuBLAS GEMM per expert" in note and "permute and unpermute as torch's sort" in note
    (only_gmm,) = grouped_gemm_notes(_traces(rank))
    assert "(gmm 2)" in only_gmm and "permute and unpermute" not in only_gmm
    assert grouped_gemm_notes(_traces([(1, None, "aten::mm")])) == []


def test_megablocks_calls_are_counted_by_call():
    rank = [(1, None, "megablocks_ops::sort"), (2, 1, "aten::sort"), (3, None, "megablocks_ops::histogram")]
    (note,) = megablocks_notes(_traces(rank, rank))
    assert note.startswith("4 MegaBlocks extension call(s) (histogram 2, sort 2) ran on Maya's stand-in")
    assert megablocks_notes(_traces([(1, None, "aten::sort")])) == []
