"""The kernel sweep: coverage, determinism, dedup, TP splits, priority order; config identity."""

from collections import defaultdict

import pytest

from maya.profiler.kernels import shapes, sweep
from maya.profiler.kernels.configs import FAMILIES, FAMILY_OPS, KernelConfig, parse_families


@pytest.fixture(scope="module")
def full_sweep() -> list[KernelConfig]:
    """The whole sweep (~143k configs, several seconds to build: its tests are `slow`)."""
    return sweep.build_sweep()


EXPECTED_DTYPES = {
    "gemm": {"bf16", "fp16", "fp32", "fp32+tf32"},
    "attention": {"bf16", "fp16", "fp32"},
    "optimizer": {"bf16", "fp32"},
    "copy": {"bf16", "fp16", "fp32"},
    "memcpy": {"u8"},
    "memset": {"u8", "bf16", "fp32"},
}


def _dtype(c: KernelConfig) -> str:
    return c.dtype + ("+tf32" if c.tf32 else "")


@pytest.mark.slow
def test_every_family_op_and_dtype_is_covered(full_sweep):
    seen = defaultdict(set)
    for c in full_sweep:
        seen[(c.family, c.op)].add(_dtype(c))
    for family, ops in FAMILY_OPS.items():
        expected = EXPECTED_DTYPES.get(family, {"bf16", "fp16", "fp32"})
        assert set().union(*(seen[(family, op)] for op in ops)) == expected, family
        for op in ops:
            assert seen[(family, op)], f"{op} never measured"
    # TF32 is a variant of fp32 matrix products only
    assert {c.family for c in full_sweep if c.tf32} == {"gemm"}
    assert all(c.dtype == "fp32" for c in full_sweep if c.tf32)


@pytest.mark.slow
def test_every_sdpa_backend_both_directions_causal_and_not(full_sweep):
    variants = {(c.shape["backend"], c.op, c.shape["causal"]) for c in full_sweep if c.family == "attention"}
    assert variants == {
        (b, op, causal) for b in ("flash", "cudnn", "efficient") for op in ("sdpa_fwd", "sdpa_bwd") for causal in (0, 1)
    }
    assert any(c.shape["kv_heads"] < c.shape["heads"] for c in full_sweep if c.family == "attention")


def test_sweep_is_deterministic_and_seeded():
    families = ("normalization", "optimizer", "memset")
    first, again, reordered = (sweep.build_sweep(families, seed) for seed in (0, 0, 1))
    assert again == first
    assert reordered != first and set(reordered) == set(first)


@pytest.mark.slow
def test_no_duplicates_and_dedup_keeps_first(full_sweep):
    keys = [c.key for c in full_sweep]
    assert len(keys) == len(set(keys))
    a, b = KernelConfig.make("mm", "bf16", m=1, n=2, k=3), KernelConfig.make("mm", "bf16", k=3, n=2, m=1)
    c = KernelConfig.make("mm", "bf16", m=1, n=2, k=3, tf32=True)
    assert a == b and a.key == b.key and a.key != c.key
    assert sweep.dedup([a, c, b]) == [a, c]


@pytest.mark.slow
def test_tensor_parallel_splits_are_present(full_sweep):
    gemm = {(c.op, c.shape.get("k"), c.shape.get("n")) for c in full_sweep if c.family == "gemm"}
    h = 8192
    for tp in (2, 4, 8):
        assert ("linear", h, 3 * h // tp) in gemm  # column-parallel QKV
        assert ("linear", h // tp, h) in gemm  # row-parallel attention output
        assert ("linear", h, 2 * shapes.ffn_size(h, "swiglu") // tp) in gemm  # SwiGLU gate+up
        assert ("linear", h, shapes.padded_vocab(128256, tp)) in gemm  # vocab-parallel LM head
    heads = {(c.shape["heads"], c.shape["head_dim"]) for c in full_sweep if c.family == "attention"}
    assert {(64 // tp, 128) for tp in (1, 2, 4, 8)} <= heads  # 8192 / 128 = 64 heads split over TP
    tokens = {c.shape["tokens"] for c in full_sweep if c.family == "normalization"}
    assert {4096 // tp for tp in (1, 2, 4, 8)} <= tokens  # sequence-parallel norms


def test_realistic_dimensions():
    assert shapes.ffn_size(4096, "swiglu") == 11008  # Llama-2 7B
    assert shapes.ffn_size(768, "gelu") == 3072  # GPT-2 small
    assert shapes.padded_vocab(50257, 1) == 50304
    assert shapes.token_counts()[0] == 128 and shapes.token_counts()[-1] == shapes.MAX_TOKENS
    assert [lin.name for lin in shapes.linear_layers(4096, "swiglu", 8)] == ["qkv", "attn_out", "ffn_up", "ffn_down"]
    assert shapes.gpt_layer_param_shapes(4096, "swiglu", 1)[-2:] == [(4096,), (4096,)]


@pytest.mark.slow
def test_priority_order_reaches_every_family_in_the_first_round(full_sweep):
    first_round = sum(sweep.FAMILY_WEIGHTS.get(f, 1) for f in FAMILIES)
    assert {c.family for c in full_sweep[:first_round]} == set(FAMILIES)
    assert [c.family for c in full_sweep[:3]] == ["gemm"] * 3


@pytest.mark.slow
def test_priority_order_spans_ops_dtypes_and_sizes_early(full_sweep):
    """Within a family, every (op, dtype) and both the smallest and largest size class come up in the
    first round of its strata, long before the family's configs run out."""
    for family in ("gemm", "normalization", "optimizer"):
        ordered = [c for c in full_sweep if c.family == family]
        strata = {(sweep.size_bucket(c), c.op, c.dtype, c.tf32) for c in ordered}
        first_round = ordered[: len(strata)]
        assert {(c.op, _dtype(c)) for c in first_round} == {(c.op, _dtype(c)) for c in ordered}
        buckets = [sweep.size_bucket(c) for c in ordered]
        assert {min(buckets), max(buckets)} <= {sweep.size_bucket(c) for c in first_round}
        assert len(first_round) < len(ordered) / 4


def test_family_subset_and_unknown_family():
    subset = sweep.build_sweep(("memcpy", "memset"))
    assert {c.family for c in subset} == {"memcpy", "memset"}
    assert parse_families(" gemm,attention ,gemm") == ("gemm", "attention")
    with pytest.raises(ValueError, match="unknown family nope"):
        sweep.build_sweep(("gemm", "nope"))


@pytest.mark.slow
def test_config_identity_is_stable_and_checked():
    c = KernelConfig.make("linear", "bf16", m=256, k=512, n=1024)
    assert c.key == "02846a8cdc6adb48"  # keys name done configs on disk: they must never change
    assert c.to_json() == (
        '{"dtype":"bf16","family":"gemm","op":"linear","params":{"k":512,"m":256,"n":1024},"tf32":false}'
    )
    assert c.label() == "gemm/linear bf16 k=512 m=256 n=1024"
    with pytest.raises(ValueError, match="unknown parameter"):
        KernelConfig.make("mm", "bf16", bogus=1)
    with pytest.raises(TypeError, match="must be int"):
        KernelConfig.make("mm", "bf16", m="1")
    with pytest.raises(KeyError, match="unknown op"):
        KernelConfig.make("conv", "bf16")
