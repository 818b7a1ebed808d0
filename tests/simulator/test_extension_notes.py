"""The prediction's notes on calls Maya's stand-ins for CUDA extensions answered (flash-attn's, grouped_gemm's)."""

from types import SimpleNamespace

import pandas as pd

from maya.simulator.notes import flash_attn_notes, grouped_gemm_notes


def _traces(*ops: list[tuple[int, int | None, str]]) -> SimpleNamespace:
    """Ranks whose ops are (op_id, parent_op_id, name) rows."""
    frames = [pd.DataFrame(rows, columns=["op_id", "parent_op_id", "name"]) for rows in ops]
    return SimpleNamespace(ranks={rank: SimpleNamespace(ops=frame) for rank, frame in enumerate(frames)})


def test_flash_attn_2_6s_calls_are_found_by_its_autograd_functions():
    """flash-attn 2.6 has no custom ops: torch's port runs inside its autograd functions and their backward nodes;
    the packed variants' gradients of views are copies there, and `Varlen` names the variable-length calls."""
    rank = [
        (1, None, "FlashAttnVarlenKVPackedFunc"),
        (2, 1, "aten::_flash_attention_forward"),
        (3, None, "FlashAttnVarlenKVPackedFuncBackward"),
        (4, 3, "aten::_flash_attention_backward"),
        (5, 3, "aten::copy_"),
        (6, 3, "aten::copy_"),
        (7, None, "FlashAttnFunc"),
        (8, 7, "aten::_flash_attention_forward"),
        (9, None, "aten::_flash_attention_forward"),  # SDPA's own call: not flash-attn's
        (10, None, "MyFlashAttnFunction"),  # a user's function of a similar name
        (11, 10, "aten::_flash_attention_forward"),
    ]
    (note,) = flash_attn_notes(_traces(rank, rank))
    assert note.startswith("6 flash-attn call(s) ran on Maya's stand-in")
    assert "; 4 gradient(s) into buffers that share their memory" in note
    assert "; 4 variable-length call(s) are priced at their sequences' mean length" in note


def test_flash_attn_2_8s_calls_are_found_by_its_custom_ops_and_none_is_no_note():
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
