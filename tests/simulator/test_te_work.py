"""Transformer Engine's own kernels priced by their work (`simulator/te_work.py`), on synthetic traces whose TE kernels
are launched inside `te::` calls carrying their tensors' shapes (as `emulator/te_calls.py` records them): each kind is
priced as the eager kernel of the same work, and its price follows the call's size; a TE kernel outside a recorded
call is counted as unsized in the prediction's note."""

import numpy as np
import pandas as pd
import pytest
from simulator.test_work_shapes import frame, write_trace

from maya.simulator import te_work
from maya.simulator.trace import load

LN_FWD = (
    "&::transformer_engine::normalization::ln_fwd_tuned_kernel<::transformer_engine::normalization::Kernel_traits<"
    "::transformer_engine::normalization::bf16, ::transformer_engine::normalization::bf16, "
    "::transformer_engine::normalization::fp8e4m3, ::transformer_engine::normalization::fp32, uint32_t, 1024>>"
)
LN_BWD = LN_FWD.replace("ln_fwd", "ln_bwd")
LN_FINALIZE = LN_FWD.replace("ln_fwd_tuned_kernel", "ln_bwd_finalize_tuned_kernel")
CAST = (
    "_ZN18transformer_engine12unary_kernelILi16ELb1EfNS_5EmptyEXadL_ZNS_8dispatch3fp86detail8identityEfRKS1_EE13"
    "__nv_bfloat1613__nv_fp8_e4m3EEvPKT4_PKT1_PT5_SE_PSC_SH_T2_mm"
)
GELU = (
    "_ZN18transformer_engine12unary_kernelILi16ELb1EfNS_5EmptyEXadL_ZNS_4geluIffEET_T0_RKS1_EE13__nv_bfloat1613"
    "__nv_fp8_e4m3EEvPKT4_PKT1_PT5_SE_PSC_SH_T2_mm"
)
DBIAS = "_ZN18transformer_engine6detail19reduce_dbias_kernelILi4Ef13__nv_bfloat16EEvPT1_PKT0_ii"
AMAX = (
    "_ZN18transformer_engine22delayed_scaling_recipe51_GLOBAL__N__5782aad1_18_delayed_scaling_cu_061efdc126"
    "amax_and_scale_update_impl11kernel_bulkEPfNS1_10AmaxParamsEmNS1_15AmaxComputeAlgoEf"
)
SOFTMAX = "_ZN3mha43scaled_masked_softmax_warp_forward"
EAGER_LN = "_ZN2at6native53_GLOBAL__N__vectorized_layer_norm_kernel"
HIDDEN = 1024

# (te call, its kernels, its tensor inputs as (shape, dtype) per rows of the hidden size)
CALLS = {
    "layernorm_fwd": ([LN_FWD], lambda t: [([t, HIDDEN], "bfloat16"), ([HIDDEN], "bfloat16")]),
    "layernorm_bwd": (
        [LN_BWD, LN_FINALIZE],
        lambda t: [([t, HIDDEN], "bfloat16"), ([t, HIDDEN], "bfloat16"), ([t], "float32")],
    ),
    "quantize": ([CAST, "cast_transpose_optimized_kernel"], lambda t: [([t, HIDDEN], "bfloat16")]),
    "fp8_transpose": (["transpose_optimized_kernel"], lambda t: [([t, HIDDEN], "uint8")]),
    "gelu": ([GELU], lambda t: [([t, 4 * HIDDEN], "bfloat16")]),
    "dbias_dgelu": (
        ["cast_transpose_fusion_kernel_optimized", DBIAS],
        lambda t: [([t, 4 * HIDDEN], "bfloat16"), ([t, 4 * HIDDEN], "bfloat16")],
    ),
    "compute_amax": ([AMAX], lambda t: [([t, HIDDEN], "bfloat16")]),
    "scaled_masked_softmax_forward": ([SOFTMAX], lambda t: [([4, 16, t // 4, t // 4], "bfloat16")]),
}


def te_run(tmp_path, tokens: int, name: str = "run"):
    """One rank launching every kernel of `CALLS` inside its `te::` call, for `tokens` rows; an eager layer norm of
    the same input; and a TE kernel outside any TE call."""
    kernels = [k for ks, _ in CALLS.values() for k in ks] + [EAGER_LN]
    ops, launches = [], []
    for op_id, (call, (names, inputs)) in enumerate(CALLS.items()):
        shapes = inputs(tokens)
        ops.append(
            {
                "op_id": op_id,
                "name": f"te::{call}",
                "input_shapes": [s for s, _ in shapes],
                "input_dtypes": [d for _, d in shapes],
            }
        )
        launches += [{"kernel_id": kernels.index(k), "op_id": op_id, "grid_x": 264} for k in names]
    eager = len(ops)
    ops.append(
        {
            "op_id": eager,
            "name": "aten::native_layer_norm",
            "input_shapes": [[tokens, HIDDEN], [HIDDEN], [HIDDEN], []],
            "input_dtypes": ["c10::BFloat16"] * 3 + ["Scalar"],
        }
    )
    launches.append({"kernel_id": len(kernels) - 1, "op_id": eager})
    ops.append({"op_id": eager + 1, "name": "_LayerNormLinear", "input_shapes": [[tokens, HIDDEN]]})
    launches.append({"kernel_id": 0, "op_id": eager + 1})  # outside a TE call: unsized
    families = ["normalization" if k == EAGER_LN else "softmax" if "softmax" in k else "other" for k in kernels]
    (tmp_path / name).mkdir()
    return write_trace(tmp_path / name, kernels, ops, launches, families)


def test_te_kernels_are_framed_as_the_eager_kernels_of_the_same_work(tmp_path):
    f = frame(te_run(tmp_path, 2048))
    rows = f.iloc[:-2].reset_index(drop=True)
    t = 2048
    expected = [
        ("normalization", "native_layer_norm", "bf16", t * HIDDEN, HIDDEN),
        ("normalization", "native_layer_norm_backward", "bf16", t * HIDDEN, HIDDEN),
        ("reduction", "sum", "fp32", 2 * HIDDEN * 264, 264),  # the fp32 partials of the backward's 264 blocks
        ("elementwise", "cast", "bf16", t * HIDDEN, HIDDEN),
        ("elementwise", "cast", "bf16", t * HIDDEN, HIDDEN),
        ("elementwise", "cast", "fp8", t * HIDDEN, HIDDEN),
        ("elementwise", "gelu", "bf16", t * 4 * HIDDEN, 4 * HIDDEN),
        ("elementwise", "gelu_bwd", "bf16", t * 4 * HIDDEN, 4 * HIDDEN),
        ("reduction", "sum", "bf16", t * 4 * HIDDEN, t),
        ("reduction", "amax", "bf16", t * HIDDEN, t * HIDDEN),
        ("softmax", "softmax_fwd", "bf16", t * t * 4, t // 4),
    ]
    got = list(rows[["family", "op", "dtype", "numel", "row"]].itertuples(index=False, name=None))
    assert got == expected
    # a cast reads bf16 once and writes one fp8 tensor, a cast-transpose two, a transpose one byte in and out
    assert rows["work_bytes"].iloc[3:6].tolist() == [t * HIDDEN * 3, t * HIDDEN * 4, t * HIDDEN * 2]
    eager = f.iloc[-2]
    assert (eager["family"], eager["op"], eager["numel"], eager["row"]) == tuple(
        rows.loc[0, ["family", "op", "numel", "row"]]
    )
    outside = f.iloc[-1]
    assert outside["family"] == "other"


def test_notes_count_the_stand_ins_and_the_unsized_kernels(tmp_path):
    trace = load(te_run(tmp_path, 2048)).ranks[0]
    counts = te_work.notes(dict(zip(trace.kernels["kernel_id"], trace.kernels["name"])), trace.calls, trace.ops)
    assert counts == {
        "LayerNorm/RMSNorm as torch's layer norm": 1,
        "their backward as torch's": 1,
        "their weight-gradient finalize as a column sum": 1,
        "fp8 casts as torch's cast": 2,
        "fp8 transposes as a one-byte cast": 1,
        "activations as torch's": 2,
        "bias gradients as torch's column sum": 1,
        "amax kernels as torch's amax": 1,
        "softmax as torch's": 1,
        "unsized": 1,
    }


@pytest.mark.slow
def test_each_kind_is_priced_by_its_size(tmp_path, estimator):
    """Each TE kernel kind at 16x the rows is priced longer; the finalize, whose size is the backward's grid (the
    same here), costs the same."""
    priced = []
    for tokens in (1024, 16384):
        f = frame(te_run(tmp_path, tokens, f"t{tokens}")).iloc[:-2]
        calls = f.rename(columns={"work_bytes": "bytes"}).assign(hardware="h100-sxm")
        priced.append(estimator.predict(calls)["duration_ns"].to_numpy())
    small, large = priced
    finalize = 2
    grows = np.delete(large / small, finalize)
    assert (grows > 2).all(), pd.Series(large / small).round(2).tolist()
    assert large[finalize] == pytest.approx(small[finalize])


def test_a_multi_tensor_kernel_is_sized_by_its_grid_not_its_calls_flag(tmp_path):
    """TE's fused Adam (`te::multi_tensor_adam(chunk, noop_flag, tensor_lists, ...)`): its lists carry no sizes, so
    its kernel is sized by its grid (one chunk a block, `simulator.multi_tensor`), not by the one-element flag."""
    kernel = (
        "_Z25multi_tensor_apply_kernelI18TensorListMetadataILi4ELb0EEN18transformer_engine17multi_tensor_adam11Adam"
        "FunctorIffffiEEJffffffNS3_10adamMode_tEfEEvlPViT_T0_DpT1_"
    )
    ops = [
        {
            "op_id": 0,
            "name": "te::multi_tensor_adam",
            "input_shapes": [[], [1], []],
            "input_dtypes": ["", "int", "TensorList"],
        }
    ]
    run = write_trace(tmp_path, [kernel], ops, [{"kernel_id": 0, "op_id": 0, "grid_x": 3}], ["optimizer"])
    f = frame(run)
    assert f.loc[0, "op"] == "multi_tensor" and f.loc[0, "work_bytes"] == 3 * 2048 * 32 * 7 * 4  # 7 fp32 passes
    trace = load(run).ranks[0]
    assert te_work.notes({0: kernel}, trace.calls, trace.ops) == {}  # nor counted as an unsized TE kernel


def one_call_run(tmp_path, call: str, inputs: list, kernels: list[str], repeat: int = 1):
    """One rank launching `kernels` (`repeat` times each) inside one `te::<call>` with tensor inputs `inputs`
    ((shape, dtype) pairs)."""
    ops = [
        {
            "op_id": 0,
            "name": f"te::{call}",
            "input_shapes": [s for s, _ in inputs],
            "input_dtypes": [d for _, d in inputs],
        }
    ]
    launches = [{"kernel_id": i, "op_id": 0, "grid_x": 264} for i in range(len(kernels)) for _ in range(repeat)]
    (tmp_path / call).mkdir()
    return write_trace(tmp_path / call, kernels, ops, launches, ["other"] * len(kernels))


SWIGLU = GELU.replace("geluIffEE", "swigluIffEE")


@pytest.mark.slow
def test_a_gated_activation_is_priced_as_the_models_silu_and_mul(tmp_path):
    """`te::swiglu` reads [T, 2F] and writes [T, F]: vLLM's `silu_and_mul` in the model's convention (Vidur's
    `mlp_act`: numel the output's T x F, two operands), not numel 2TF of one operand; its gradient reads the
    gradient [T, F] and the input [T, 2F] and writes [T, 2F]: 5TF elements moved."""
    t, ffn = 2048, 4 * HIDDEN
    f = frame(one_call_run(tmp_path, "swiglu", [([t, 2 * ffn], "bfloat16")], [SWIGLU])).iloc[0]
    assert (f["family"], f["op"], f["numel"], f["row"], f["operands"]) == (
        "elementwise",
        "silu_and_mul",
        t * ffn,
        ffn,
        2,
    )
    b = frame(one_call_run(tmp_path, "dswiglu", [([t, ffn], "bfloat16"), ([t, 2 * ffn], "bfloat16")], [SWIGLU])).iloc[0]
    assert (b["op"], b["numel"], b["row"]) == ("silu_bwd", 2 * t * ffn, 2 * ffn)
    assert b["numel"] * (b["operands"] + 1) == 5 * t * ffn  # the elementwise family's elements moved
    g = frame(one_call_run(tmp_path, "gelu", [([t, ffn], "bfloat16")], [GELU])).iloc[0]
    assert (g["op"], g["numel"], g["operands"]) == ("gelu", t * ffn, 1)  # not gated: unchanged


def test_scale_and_amax_reset_kernels_are_launches_not_amax_passes(tmp_path):
    """Current scaling's `compute_scale_from_amax_kernel` (one thread), its amax reset `zero_amax_kernel` (as
    Megatron's `--fp8-recipe tensorwise` launches it before each amax) and the grouped amax reset are scalar
    kernels: priced as a launch, not as an amax over the call's input; TE's amax kernel itself still is one."""
    t = 2048
    kernels = [
        "_ZN18transformer_engine6detail30compute_scale_from_amax_kernelEPKfPfS3_fbfb",
        "_ZN18transformer_engine6detail24grouped_amax_zero_kernelEPPfi",
        "_ZN18transformer_engine51_GLOBAL__N__95d1fbd5_18_current_scaling_cu_6a676ec616zero_amax_kernelEPfPKf",
        "_ZN18transformer_engine6detail11amax_kernelILi16E13__nv_bfloat16EEvPKT0_PfPKfm",
    ]
    f = frame(one_call_run(tmp_path, "quantize", [([t, HIDDEN], "bfloat16")], kernels))
    assert f["family"].tolist()[:3] == ["other"] * 3 and f["numel"].tolist()[:3] == [1.0] * 3
    assert (f.loc[3, "op"], f.loc[3, "numel"]) == ("amax", t * HIDDEN)
    assert {te_work.kind_of(k, "quantize") for k in kernels[:3]} == {"scalar"}


@pytest.mark.slow
def test_notes_match_each_distinct_kernel_once_and_skip_a_trace_without_te(tmp_path, monkeypatch):
    """The notes' work is per distinct (kernel, call), not per launch: 50 launches of one TE kernel in one call are
    one kind lookup, counted 50 times; a trace with no `te::` call and no TE kernel name is answered at once."""
    looked_up = []
    kind_of = te_work.kind_of
    monkeypatch.setattr(te_work, "kind_of", lambda k, c: looked_up.append(k) or kind_of(k, c))
    run = one_call_run(tmp_path, "gelu", [([2048, HIDDEN], "bfloat16")], [GELU], repeat=50)
    trace = load(run).ranks[0]
    assert te_work.notes({0: GELU}, trace.calls, trace.ops) == {"activations as torch's": 50}
    assert looked_up == [GELU]

    searched = []

    class Spy:
        def search(self, text):
            searched.append(text)
            return None

    monkeypatch.setattr(te_work, "TE_KERNEL", Spy())
    ops = [{"op_id": 0, "name": "aten::native_layer_norm", "input_shapes": [[2048, HIDDEN]]}]
    eager = write_trace(tmp_path, [EAGER_LN], ops, [{"kernel_id": 0, "op_id": 0}] * 50, ["normalization"])
    trace = load(eager).ranks[0]
    assert te_work.notes({0: EAGER_LN}, trace.calls, trace.ops) == {}
    assert len(searched) <= 1  # the kernel's name once, not once per launch


ROPE_FWD = "_ZN18transformer_engine25fused_rope_forward_kernelI13__nv_bfloat16EEvPKT_PKiPKfS6_PS2_biiiiiiiiiiiiii"
ROPE_BWD = ROPE_FWD.replace("25fused_rope_forward", "26fused_rope_backward")
ROPE_THD_BWD = "_ZN18transformer_engine42fused_rope_thd_linear_grid_backward_kernelI13__nv_bfloat16EEvPKT_PKiPKfS6_PS2_biiiiiiiiiiii"
QKV_ROPE_FWD = (
    "_ZN18transformer_engine29fused_qkv_rope_forward_kernelI13__nv_bfloat16EEvPKT_PKfS6_PKiPS2_S9_S9_15NVTE_QKV_Format"
    "biiiiiiiiii"
)


@pytest.mark.parametrize(
    ("call", "kernel", "shape"),
    [
        ("fused_rope_forward", ROPE_FWD, [256, 2, 8, 64]),  # sbhd
        ("fused_rope_backward", ROPE_BWD, [256, 2, 8, 64]),
        ("fused_rope_backward", ROPE_THD_BWD, [512, 8, 64]),  # thd: packed sequences, cu_seqlens
    ],
)
def test_a_fused_rope_is_priced_as_the_rotary_embedding_kernel(tmp_path, call, kernel, shape):
    """Megatron's Llama-style models rotate q and k with TE's fused RoPE (`te::fused_rope_forward(t, freqs, ...)`,
    t [s, b, h, d] or THD's [t, h, d], freqs [s, 1, 1, d] in fp32): priced as vLLM's `rotary_embedding` over t
    (numel its elements, row its head dimension) and counted under its own stand-in, not as an unsized TE kernel."""
    inputs = [(shape, "bfloat16"), ([shape[0], 1, 1, shape[-1]], "float32")]
    run = one_call_run(tmp_path, call, inputs, [kernel])
    f = frame(run).iloc[0]
    assert (f["family"], f["op"], f["dtype"], f["numel"], f["row"]) == (
        "elementwise",
        "rotary_embedding",
        "bf16",
        int(np.prod(shape)),
        shape[-1],
    )
    trace = load(run).ranks[0]
    assert te_work.notes({0: kernel}, trace.calls, trace.ops) == {"fused RoPE as vLLM's rotary embedding": 1}


def test_only_te_s_fused_rope_kernels_are_rope():
    """The fused-QKV RoPE is left unsized (its tensor is the packed q/k/v, not one head's rows), and a kernel whose
    mangled name holds `rope` elsewhere (`...PropE...`, lowered) is not RoPE."""
    assert te_work.kind_of(QKV_ROPE_FWD, "fused_qkv_rope_forward") is None
    assert te_work.kind_of("_ZN18transformer_engine6detail12PropEkernelEPf", "quantize") is None
    assert te_work.kind_of(ROPE_FWD, "fused_rope_forward") == "rope"
