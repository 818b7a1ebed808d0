"""What the simulator prices each kernel as (`work_frame`) on small synthetic traces: torch's FlashAttention-2
kernels shaped from their attention op (causal flag from the kernel's template arguments; torch's port, or the
flash-attn package where the port stands in for it), and the pieces of an
op TensorIterator split at 32-bit offsets each given their share, and `torch._grouped_mm`'s CUTLASS grouped GEMMs
shaped from their op (an MoE's experts) with their one-block setup kernel sized by the group offsets."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from maya.data.workloads.mpt import PACKAGE_ATTENTION_RANGE
from maya.emulator.standins.flash_attn_2_cuda import RANGE as STANDIN_RANGE
from maya.simulator.attention_shapes import (
    PACKAGE_ATTENTION_RANGES,
    TRITON_ATTENTION_RANGE,
    kernel_causal,
    kernel_implementation,
    kernel_role,
)
from maya.simulator.opcodes import NOP, classify
from maya.simulator.trace import load
from maya.simulator.work import _largest_inputs, work_frame
from maya_trace_spec import RunWriter
from maya_trace_spec.vocabulary import classify_kernel, dtype_name

FWD = (
    "_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi64ELi128ELi128ELi4ELb0ELb0EN7cutlass10bfloat16"
    "_tE19Flash_kernel_traitsILi64ELi128ELi128ELi4ES3_EELb0ELb{causal}ELb0ELb0ELb1ELb1ELb0ELb0EEEvNS_16Flash_fwd_paramsE"
)
BWD = (
    "_ZN13pytorch_flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi64ELi128ELi128ELi8ELi4"
    "ELi4ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi8ES3_EELb0ELb{causal}ELb0ELb0ELb1"
    "ELb1ELb0EEEvNS_16Flash_bwd_paramsE"
)
PRE = (
    "_ZN13pytorch_flash25flash_bwd_dot_do_o_kernelILb1E23Flash_bwd_kernel_traitsILi64ELi128ELi128ELi8ELi4ELi4ELi4ELb0"
    "ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi8ES3_EEEEvNS_16Flash_bwd_paramsE"
)
POST = (
    "_ZN13pytorch_flash27flash_bwd_convert_dq_kernelI23Flash_bwd_kernel_traitsILi64ELi128ELi128ELi8ELi4ELi4ELi4ELb0"
    "ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi8ES3_EEEEvNS_16Flash_bwd_paramsEi"
)
SPLIT_FWD = (  # as torch 2.15's SDPA flash backend launched it: batch 1 x 4 heads x 1,024 causal tokens, 2 splits
    "_ZN13pytorch_flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutlass10bfloa"
    "t16_tE19Flash_kernel_traitsILi64ELi64ELi256ELi4ES3_EELb{causal}ELb0ELb0ELb1ELb1ELb0ELb1ELb0EEEvNS_16Flash_fwd_paramsE"
)
COMBINE = (
    "_ZN13pytorch_flash32flash_fwd_splitkv_combine_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutl"
    "ass10bfloat16_tE19Flash_kernel_traitsILi64ELi64ELi256ELi4ES3_EELi8ELi1ELb1EEEvNS_16Flash_fwd_paramsE"
)
COPY = "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_27direct_copy_kernel_cudaERNS_18TensorIteratorBaseEE"
SORT = "_ZN3cub18DeviceRadixSortOnesweepKernelI"


def write_trace(
    tmp_path: Path, kernels: list[str], ops: list[dict], launches: list[dict], families: list[str] | None = None
) -> Path:
    """One rank: `kernels` (kernel_id = index; `families`, else attention, elementwise or other by name), `ops`
    (op_id, name, parent_op_id, input_shapes, input_dtypes) and kernel launches (kernel_id, op_id, grid_x)."""
    w = RunWriter(tmp_path / "run")
    w.write(
        "run",
        {
            "run_id": ["r"],
            "created_at_ns": [0],
            "source": ["synthetic"],
            "status": ["complete"],
            "hardware": ["a100-sxm-80gb"],
            "world_size": [1],
            "nnodes": [1],
            "nproc_per_node": [1],
        },
    )
    w.write("devices", {"local_rank": [0], "node": [0], "device_index": [0], "hardware": ["a100-sxm-80gb"]}, rank=0)
    w.write(
        "kernels",
        {
            "kernel_id": list(range(len(kernels))),
            "name": kernels,
            "family": families
            or ["attention" if "flash" in k else "elementwise" if "elementwise" in k else "other" for k in kernels],
        },
        rank=0,
    )
    w.write(
        "ops",
        {
            "op_id": [o["op_id"] for o in ops],
            "name": [o["name"] for o in ops],
            "parent_op_id": [o.get("parent_op_id") for o in ops],
            "start_ns": [0] * len(ops),
            "input_shapes": [o.get("input_shapes") for o in ops],
            "input_dtypes": [o.get("input_dtypes") for o in ops],
            "seq_nr": [o.get("seq_nr") for o in ops],
        },
        rank=0,
    )
    w.write(
        "api_calls",
        {
            "seq": list(range(len(launches))),
            "api": ["cudaLaunchKernel"] * len(launches),
            "domain": ["runtime"] * len(launches),
            "start_ns": list(range(len(launches))),
            "time_source": ["emulated"] * len(launches),
            "stream_id": [0] * len(launches),
            "kernel_id": [c["kernel_id"] for c in launches],
            "op_id": [c["op_id"] for c in launches],
            "grid_x": [c.get("grid_x", 1) for c in launches],
            "grid_y": [c.get("grid_y", 1) for c in launches],
        },
        rank=0,
    )
    return tmp_path / "run"


def frame(run: Path):
    trace = load(run).ranks[0]
    return work_frame(trace, classify(trace.calls))


def sdpa_ops(causal_layout_bhsd: bool = False) -> list[dict]:
    """SDPA -> its flash op -> _flash_attention_forward/backward, q/k/v of [batch 2, seq 1024, heads 8, dim 64]."""
    q = [2, 1024, 8, 64]
    inner = [q, q, q] + [[]] * 6
    return [
        {"op_id": 1, "name": "aten::scaled_dot_product_attention", "input_shapes": [[2, 8, 1024, 64]] * 3},
        {
            "op_id": 2,
            "name": "aten::_scaled_dot_product_flash_attention",
            "parent_op_id": 1,
            "input_shapes": [[2, 8, 1024, 64]] * 3,
            "input_dtypes": ["c10::BFloat16"] * 3,
        },
        {
            "op_id": 3,
            "name": "aten::_flash_attention_forward",
            "parent_op_id": 2,
            "input_shapes": inner,
            "input_dtypes": ["c10::BFloat16"] * 3 + [""] * 6,
        },
        {
            "op_id": 4,
            "name": "aten::_flash_attention_backward",
            "input_shapes": [q, q, q, q, q, [2, 8, 1024]] + [[]] * 6,
            "input_dtypes": ["c10::BFloat16"] * 5 + ["float"] + [""] * 6,
        },
    ]


@pytest.mark.parametrize("causal", [0, 1])
def test_torch_flash_kernels_take_their_shape_from_the_attention_op(tmp_path, causal):
    kernels = [FWD.format(causal=causal), PRE, BWD.format(causal=causal), POST]
    run = write_trace(
        tmp_path,
        kernels,
        sdpa_ops(),
        [
            {"kernel_id": 0, "op_id": 3},
            {"kernel_id": 1, "op_id": 4},
            {"kernel_id": 2, "op_id": 4},
            {"kernel_id": 3, "op_id": 4},
        ],
    )
    work = frame(run)
    suffix = "_causal" if causal else ""
    assert work["op"].tolist() == [  # SDPA's flash backend: torch's port
        f"torchflash_fwd{suffix}",
        "torchflash_bwd_preprocess",
        f"torchflash_bwd{suffix}",
        "torchflash_bwd_postprocess",
    ]
    assert (work["family"] == "attention").all() and (work["dtype"] == "bf16").all()
    assert work[["batch", "m", "n", "k"]].to_numpy().tolist() == [[16.0, 1024.0, 1024.0, 64.0]] * 4
    share = 0.5 if causal else 1.0
    assert work["flops"].tolist() == [4 * 16 * 1024**2 * 64 * share, 0.0, 10 * 16 * 1024**2 * 64 * share, 0.0]


def test_attention_in_the_triton_range_and_its_backward_are_llm_foundry_triton_and_cutlass_is_efficient(tmp_path):
    """Forward ops inside the range are marked; backward ops by the sequence number their autograd node shares with
    the forward op; the memory-efficient CUTLASS kernels outside it are `efficient`."""
    ops = sdpa_ops()
    ops[0]["parent_op_id"], ops[1]["seq_nr"] = 10, 7
    ops[3]["parent_op_id"] = 20
    ops += [
        {"op_id": 10, "name": TRITON_ATTENTION_RANGE},
        {"op_id": 20, "name": "ScaledDotProductFlashAttentionBackward0", "seq_nr": 7},
        {**sdpa_ops()[2], "op_id": 30, "parent_op_id": None},  # outside the range: kernels of its own name
        {**sdpa_ops()[3], "op_id": 40, "parent_op_id": 50},
        {"op_id": 50, "name": "ScaledDotProductFlashAttentionBackward0", "seq_nr": 8},
    ]
    cutlass = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80"
    kernels = [FWD.format(causal=1), PRE, BWD.format(causal=1), POST, cutlass]
    launches = [{"kernel_id": k, "op_id": o} for k, o in ((0, 3), (1, 4), (2, 4), (3, 4), (4, 30), (2, 40))]
    work = frame(write_trace(tmp_path, kernels, ops, launches, families=["attention"] * 5))
    assert work["op"].tolist() == [
        "lftriton_fwd_causal",
        "lftriton_bwd_preprocess",
        "lftriton_bwd_causal",
        "lftriton_bwd_postprocess",
        "efficient_fwd",
        "torchflash_bwd_causal",
    ]


@pytest.mark.parametrize(
    "range_name", [f"{STANDIN_RANGE}fwd", "flash_attn::_flash_attn_forward", PACKAGE_ATTENTION_RANGE]
)
def test_torchs_port_inside_a_package_range_is_the_flash_attn_package(tmp_path, range_name):
    """Where torch's port stands in for the flash-attn package (Maya's stand-in for its extension, llm-foundry's
    `flash` rows), its kernels are the package's `flash`: forward ops inside the range, backward ops by their
    autograd node's sequence number, or inside a range of their own (the stand-in's `bwd`); the port's kernels
    elsewhere stay `torchflash`."""
    ops = sdpa_ops()
    ops[0]["parent_op_id"], ops[1]["seq_nr"] = 10, 7
    ops[3]["parent_op_id"] = 20
    ops += [
        {"op_id": 10, "name": range_name},
        {"op_id": 20, "name": "ScaledDotProductFlashAttentionBackward0", "seq_nr": 7},
        {**sdpa_ops()[3], "op_id": 40, "parent_op_id": 50},  # a backward inside the stand-in's own range
        {"op_id": 50, "name": f"{STANDIN_RANGE}bwd"},
        {**sdpa_ops()[2], "op_id": 60, "parent_op_id": None},  # outside every range: torch's port
    ]
    kernels = [FWD.format(causal=1), PRE, BWD.format(causal=1), POST]
    launches = [{"kernel_id": k, "op_id": o} for k, o in ((0, 3), (1, 4), (2, 4), (3, 4), (2, 40), (0, 60))]
    work = frame(write_trace(tmp_path, kernels, ops, launches))
    assert work["op"].tolist() == [
        "flash_fwd_causal",
        "flash_bwd_preprocess",
        "flash_bwd_causal",
        "flash_bwd_postprocess",
        "flash_bwd_causal",
        "torchflash_fwd_causal",
    ]
    assert range_name.startswith(PACKAGE_ATTENTION_RANGES)


@pytest.mark.parametrize("causal", [0, 1])
def test_a_split_kv_forward_is_the_forward_of_its_shape_and_a_merge_of_its_splits(tmp_path, causal):
    """Where batch x heads x query blocks would not fill the GPU, torch's port splits the keys (grid: query blocks,
    splits, batch x heads) and merges the fp32 partial outputs: the split kernel's causal flag is its first, the merge
    is a memory pass over the grid's splits, not a second forward."""
    run = write_trace(
        tmp_path,
        [SPLIT_FWD.format(causal=causal), COMBINE],
        sdpa_ops(),
        [{"kernel_id": 0, "op_id": 3, "grid_x": 16, "grid_y": 3}, {"kernel_id": 1, "op_id": 3, "grid_x": 2048}],
    )
    work = frame(run)
    suffix = "_causal" if causal else ""
    assert work["op"].tolist() == [f"torchflash_fwd{suffix}", "torchflash_fwd_combine"]
    assert work[["batch", "m", "n", "k"]].to_numpy().tolist() == [
        [16.0, 1024.0, 1024.0, 64.0],
        [16.0, 1024.0, 3.0, 64.0],
    ]
    assert work["flops"].tolist() == [4 * 16 * 1024**2 * 64 * (0.5 if causal else 1.0), 0.0]


def test_the_packages_own_kernels_are_flash_and_torchs_port_is_torchflash():
    assert kernel_implementation(FWD.format(causal=0)) == "torchflash"
    demangled = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>, false, true>(Flash_fwd_params)"
    assert kernel_implementation(demangled) == "flash"  # flash-attn's own namespace, in a measured trace
    assert kernel_implementation("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "efficient"


def test_kernel_roles_and_causal_flags_from_names():
    assert kernel_causal(FWD.format(causal=1)) is True and kernel_causal(FWD.format(causal=0)) is False
    assert kernel_causal(BWD.format(causal=1)) is True
    demangled = (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
        "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
    )
    assert kernel_causal(demangled) is True
    split = demangled.replace("flash_fwd_kernel", "flash_fwd_splitkv_kernel").replace(
        "false, true, false,", "true, false,"
    )
    assert kernel_causal(split) is True  # the split-KV kernel has no dropout flag: causal comes first
    assert kernel_causal(SPLIT_FWD.format(causal=1)) is True and kernel_causal(SPLIT_FWD.format(causal=0)) is False
    assert kernel_role(SPLIT_FWD) == "fwd" and kernel_role(COMBINE) == "combine"
    assert kernel_causal(PRE) is None or kernel_role(PRE) == "preprocess"
    assert kernel_causal("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") is None  # the flag is a run-time argument
    assert [kernel_role(n) for n in (FWD, BWD, PRE, POST, "fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "x")] == [
        "fwd",
        "bwd",
        "preprocess",
        "postprocess",
        "bwd",
        None,
    ]


def test_an_op_split_at_32_bit_offsets_gives_each_piece_its_share(tmp_path):
    """A bf16 -> fp32 copy of 2^30 elements (4 GiB out) runs as 4 pieces; a small op launching a kernel twice and a
    sort's passes over the whole input keep the op's size."""
    big, small = [2**15, 2**15], [1024]
    ops = [
        {"op_id": 1, "name": "aten::copy_", "input_shapes": [big, big], "input_dtypes": ["float", "c10::BFloat16"]},
        {"op_id": 2, "name": "aten::copy_", "input_shapes": [small, small], "input_dtypes": ["float", "float"]},
        {"op_id": 3, "name": "aten::sort", "input_shapes": [big], "input_dtypes": ["float"]},
    ]
    launches = (
        [{"kernel_id": 0, "op_id": 1, "grid_x": g} for g in (3, 1, 2, 2)]
        + [{"kernel_id": 0, "op_id": 2, "grid_x": 1}] * 2
        + [{"kernel_id": 1, "op_id": 3, "grid_x": 4}] * 3
    )
    work = frame(write_trace(tmp_path, [COPY, SORT], ops, launches))
    numel = work["numel"].to_numpy()
    assert numel[:4].tolist() == [2**30 * 3 / 8, 2**30 / 8, 2**30 / 4, 2**30 / 4]
    assert numel[:4].sum() == 2**30
    assert numel[4:6].tolist() == [1024.0, 1024.0]
    assert numel[6:].tolist() == [2.0**30] * 3
    assert np.all(work["family"].to_numpy()[:4] == "elementwise")


GROUPED = (
    "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalINS5_17"
    "GroupProblemShapeIN4cute5tupleIJiiiEEEEENS5_10collective13CollectiveMmaEEEEEvNT_6ParamsE"
)
SETUP = "_ZN2at4cuda6detail25prepare_grouped_gemm_dataIN7cutlass10bfloat16_tES4_S4_fN4cute5tupleIJiiiEEEEEvPT_"


def test_grouped_gemms_take_their_shape_from_the_grouped_mm_op(tmp_path):
    """An MoE layer's experts (8 groups, 4,096 routed tokens, 1,024 -> 2,048): forward and input gradient
    ([T, K] by [G, K, N]) and weight gradient ([K, T] by [T, N] into [G, K, N]) are each 2·T·K·N FLOPs, as 8
    equal products; the setup kernel is no GEMM and reads the 8 offsets, not the weights."""
    bf16 = ["c10::BFloat16", "c10::BFloat16", "int", "", ""]
    ops = [
        {
            "op_id": 1,
            "name": "aten::_grouped_mm",
            "input_shapes": [[4096, 1024], [8, 1024, 2048], [8], [], []],
            "input_dtypes": bf16,
        },
        {
            "op_id": 2,
            "name": "aten::_grouped_mm",
            "input_shapes": [[4096, 2048], [8, 2048, 1024], [8], [], []],
            "input_dtypes": bf16,
        },
        {
            "op_id": 3,
            "name": "aten::_grouped_mm",
            "input_shapes": [[1024, 4096], [4096, 2048], [8], [], []],
            "input_dtypes": bf16,
        },
    ]
    launches = [{"kernel_id": k, "op_id": op} for op in (1, 2, 3) for k in (1, 0)]
    f = frame(
        write_trace(
            tmp_path, [GROUPED, SETUP], ops, launches, families=[classify_kernel(k)["family"] for k in (GROUPED, SETUP)]
        )
    )
    gemms, setups = f.iloc[1::2], f.iloc[0::2]
    assert (gemms["family"] == "gemm").all() and (gemms["dtype"] == "bf16").all()
    assert gemms["flops"].tolist() == [2.0 * 4096 * 1024 * 2048] * 3 and (gemms["batch"] == 8).all()
    assert sorted(gemms[["m", "n", "k"]].iloc[0]) == [512, 1024, 2048]  # each group: 512 tokens
    assert sorted(gemms[["m", "n", "k"]].iloc[2]) == [512, 1024, 2048]  # each group: 512 tokens reduced
    assert (setups["family"] == "other").all() and (setups["numel"] == 8).all()


def _largest_inputs_one_by_one(shapes, dtypes):
    """The per-op loop `work._largest_inputs` replaced (the reference it must equal)."""
    numel, row, dtype = [], [], []
    for op_shapes, op_dtypes in zip(shapes, dtypes):
        best, best_row, best_dtype = np.nan, np.nan, None
        for j, shape in enumerate(op_shapes if op_shapes is not None else ()):
            if shape is None or len(shape) == 0:
                continue
            size = float(np.prod(shape))
            if not best >= size:
                best, best_row = size, float(shape[-1])
                best_dtype = dtype_name(op_dtypes[j]) if op_dtypes is not None and j < len(op_dtypes) else None
        numel.append(best)
        row.append(best_row)
        dtype.append(best_dtype)
    return np.array(numel), np.array(row), dtype


def test_largest_inputs_equal_the_per_op_loop():
    """Ties (the first wins), scalars and missing tensors skipped, dtypes missing, short, unknown or absent."""
    rng = np.random.default_rng(0)
    spellings = ["c10::BFloat16", "float", "Scalar", "", None, "c10::Half", "long int"]
    shapes, dtypes = [], []
    for _ in range(3000):
        if rng.random() < 0.05:
            shapes.append(None)
            dtypes.append(None)
            continue
        tensors = []
        for _ in range(rng.integers(0, 6)):
            kind = rng.random()
            tensors.append(None if kind < 0.05 else [] if kind < 0.2 else list(rng.integers(0, 9, rng.integers(1, 4))))
        shapes.append(tensors)
        count = len(tensors) - int(rng.integers(0, 2))
        dtypes.append(None if rng.random() < 0.05 else [spellings[i] for i in rng.integers(0, 7, max(count, 0))])
    shapes += [[[2, 3], [3, 2], [6]], [[4, 4], [2, 2]], [[1 << 40, 1 << 20], [1, 1]]]
    dtypes += [["float", "c10::Half", "c10::BFloat16"], ["c10::Half"], None]
    frame = pd.DataFrame(
        {"input_shapes": pd.Series(shapes, dtype=object), "input_dtypes": pd.Series(dtypes, dtype=object)}
    )
    numel, row, dtype = _largest_inputs(frame["input_shapes"], frame["input_dtypes"])
    expected = _largest_inputs_one_by_one(shapes, dtypes)
    np.testing.assert_array_equal(numel, expected[0])
    np.testing.assert_array_equal(row, expected[1])
    assert list(dtype) == expected[2]
    assert (numel[-3], row[-3], dtype[-3]) == (6.0, 3.0, "fp32")  # [2, 3] and [3, 2] tie with [6]: the first


def test_classify_gives_a_call_without_an_api_name_no_other_calls_opcode():
    """Distinct API names are tested once each: a missing name is its own (no-op) name, not the last one's."""
    calls = pd.DataFrame(
        {
            "api": ["cudaLaunchKernel", None, "cudaMemcpyAsync"],
            "domain": ["runtime"] * 3,
            "collective_name": [None] * 3,
            "kernel_id": [1.0, None, None],
            "gemm_m": [None] * 3,
            "bytes": [None, None, 8.0],
            "memcpy_kind": [None, None, "DtoH"],
            "device_duration_ns": [None] * 3,
        }
    )
    ops = classify(calls)
    assert ops[1] == NOP and ops[0] != ops[2]


def test_op_inputs_stay_in_arrow_and_price_as_the_python_lists_did(tmp_path):
    """`load` keeps ops' input lists in Arrow (`trace.ARROW_LISTS`): the call frame built from them equals, column
    by column, the one built from the same ops as Python objects (the representation before), over attention ops, a
    grouped GEMM, an embedding lookup and an op with no recorded inputs (null lists)."""
    ops = [
        *sdpa_ops(),
        {
            "op_id": 5,
            "name": "aten::_grouped_mm",
            "input_shapes": [[4096, 1024], [8, 1024, 2048], [8], [], []],
            "input_dtypes": ["c10::BFloat16", "c10::BFloat16", "int", "", ""],
        },
        {"op_id": 6, "name": "aten::embedding", "input_shapes": [[50304, 768], [4, 1024]], "input_dtypes": None},
        {"op_id": 7, "name": "aten::mul"},
    ]
    kernels = [FWD.format(causal=1), PRE, BWD.format(causal=1), POST, GROUPED, SETUP, COPY]
    launches = [{"kernel_id": k, "op_id": op} for k, op in ((0, 3), (1, 4), (2, 4), (3, 4), (4, 5), (5, 5))]
    launches += [{"kernel_id": 6, "op_id": 6}, {"kernel_id": 6, "op_id": 7}]
    families = [classify_kernel(k)["family"] for k in kernels[:-1]] + ["elementwise"]
    trace = load(write_trace(tmp_path, kernels, ops, launches, families)).ranks[0]
    assert all(isinstance(trace.ops[c].dtype, pd.ArrowDtype) for c in ("input_shapes", "input_dtypes"))
    python = {c: trace.ops[c].array.__arrow_array__().to_pandas().to_numpy() for c in ("input_shapes", "input_dtypes")}
    as_objects = replace(trace, ops=trace.ops.assign(**python))  # as `Table.to_pandas` gives them: NumPy arrays
    assert isinstance(as_objects.ops["input_shapes"].iat[0][0], np.ndarray)
    got, before = (work_frame(t, classify(t.calls)) for t in (trace, as_objects))
    pd.testing.assert_frame_equal(got, before)
    assert got["family"].tolist()[4:] == ["gemm", "other", "embedding", "elementwise"]
    assert got["numel"].iat[6] == 4 * 1024 * 768 and np.isnan(got["numel"].iat[7])  # the rows it gathers; no inputs
